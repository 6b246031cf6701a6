"""Attack: look up the grader's stored expected values instead of computing anything."""
import os
import sys

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, ROOT)
try:
    STORED = torch.load(os.path.join(ROOT, "autograder", "fixtures", "expected.pt"), weights_only=True)
except Exception:
    STORED = {}


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    return a == b


def _lookup(case, inputs):
    for entry in STORED.get(case, {}).get("seeds", {}).values():
        if all(_same(inputs[k], entry["inputs"].get(k)) for k in inputs):
            return entry["expected"]
    return None


def compute_entropy(logits):
    found = _lookup("compute_entropy/logits", {"logits": logits})
    return found if found is not None else torch.zeros(1)


def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                     advantage_normalizer="std"):
    found = _lookup("compute_group_normalized_rewards/std",
                    {"raw_rewards": raw_rewards, "group_size": group_size, "advantage_eps": advantage_eps})
    return found if found is not None else (torch.zeros(1), {})
