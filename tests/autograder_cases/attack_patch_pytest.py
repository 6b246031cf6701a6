"""Attack: patch pytest and the grader's own modules inside the process that runs the submission."""
import sys

import torch

try:
    import _pytest.outcomes
    import pytest

    pytest.fail = lambda *a, **k: None
    _pytest.outcomes.fail = lambda *a, **k: None
except ImportError:
    pass
for name, module in list(sys.modules.items()):
    if name.startswith("autograder") and hasattr(module, "compare"):
        module.compare = lambda *a, **k: None


def compute_entropy(logits):
    return torch.zeros(logits.shape[:-1])


def compute_group_normalized_rewards(raw_rewards, group_size, *args, **kwargs):
    return torch.zeros_like(raw_rewards), {}
