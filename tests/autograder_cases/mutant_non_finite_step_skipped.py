"""Mutant: a non-finite loss silently skips the step (as AMP's GradScaler does) instead of raising."""
import torch
from _impl import build

globals().update(build())
_correct = grpo_train_step  # noqa: F821  (defined by the update above)


def grpo_train_step(*args, **kwargs):
    try:
        return _correct(*args, **kwargs)
    except RuntimeError:
        return torch.tensor(float("nan")), {}
