"""Mutant: noclip's ratio taken as exp(log π_old − log π), upside down."""
from _impl import build

globals().update(build())
_correct = compute_policy_gradient_loss  # noqa: F821  (defined by the update above)


def compute_policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs, importance_reweighting_method="none",
                                 old_log_probs=None, cliprange=None, response_mask=None):
    if importance_reweighting_method == "noclip" and old_log_probs is not None:
        a = raw_rewards_or_advantages.reshape(-1, 1).to(policy_log_probs.dtype)
        loss = -a * (old_log_probs.detach() - policy_log_probs).exp()
        return loss, {}
    return _correct(raw_rewards_or_advantages, policy_log_probs, importance_reweighting_method,
                    old_log_probs, cliprange, response_mask)
