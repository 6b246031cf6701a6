"""Mutant: a missing cliprange silently defaults to 0.2 instead of raising ValueError."""
from _impl import build

globals().update(build())
_correct = compute_policy_gradient_loss  # noqa: F821  (defined by the update above)


def compute_policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs, pg_method="none",
                                 old_log_probs=None, cliprange=None, response_mask=None):
    return _correct(raw_rewards_or_advantages, policy_log_probs, pg_method,
                    old_log_probs, 0.2 if cliprange is None else cliprange, response_mask)
