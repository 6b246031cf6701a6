"""Mutant: the 'none' loss written as A·log π (the objective to maximize), without the minus sign."""
from _impl import build

globals().update(build())
_correct = compute_policy_gradient_loss  # noqa: F821  (defined by the update above)


def compute_policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs, pg_method="none",
                                 old_log_probs=None, cliprange=None, response_mask=None):
    loss, metadata = _correct(raw_rewards_or_advantages, policy_log_probs, pg_method,
                              old_log_probs, cliprange, response_mask)
    return (-loss, metadata) if pg_method == "none" else (loss, metadata)
