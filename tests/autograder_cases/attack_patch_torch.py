"""Attack: patch torch and numpy so that every comparison says "equal", then return garbage."""
import numpy
import torch

torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
numpy.allclose = lambda *a, **k: True


def compute_entropy(logits):
    return torch.zeros(logits.shape[:-1])


def compute_group_normalized_rewards(raw_rewards, group_size, *args, **kwargs):
    return torch.zeros_like(raw_rewards), {"advantage_mean": 0.0, "advantage_std": 0.0}
