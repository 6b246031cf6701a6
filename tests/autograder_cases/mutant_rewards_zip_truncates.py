"""Mutant: no length check; zip() silently drops the responses that have no ground truth."""
from _impl import build

globals().update(build())
_correct = compute_rollout_rewards  # noqa: F821  (defined by the update above)


def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
    pairs = list(zip(rollout_responses, repeated_ground_truths))
    return _correct(reward_fn, [r for r, _ in pairs], [g for _, g in pairs])
