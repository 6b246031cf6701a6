"""Mutant: advantage_eps ignored (r - mean) / std, so a group of equal rewards gives 0/0 = NaN."""
from _impl import build

globals().update(build())
_correct = compute_group_normalized_rewards  # noqa: F821  (defined by the update above)


def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                     advantage_normalizer="std"):
    return _correct(raw_rewards, group_size, baseline, 0.0, advantage_normalizer)
