"""Mutant: advantage_mean/advantage_std logged from the raw rewards instead of the advantages."""
from _impl import build

globals().update(build())
_correct = compute_group_normalized_rewards  # noqa: F821  (defined by the update above)


def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                     advantage_normalizer="std"):
    advantages, _ = _correct(raw_rewards, group_size, baseline, advantage_eps, advantage_normalizer)
    r = raw_rewards.double()
    return advantages, {"advantage_mean": r.mean().item(), "advantage_std": r.std().item()}
