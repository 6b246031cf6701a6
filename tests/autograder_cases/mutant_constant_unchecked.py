"""Mutant: normalization_constant never validated: 0 gives inf, a negative constant flips the loss."""
from _impl import build

globals().update(build())


def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                     normalization_constant=None):
    m = mask.to(per_token_policy_gradient_loss.dtype)
    sums = (per_token_policy_gradient_loss * m).sum(1)
    if loss_normalization == "sequence":
        return (sums / m.sum(1).clamp_min(1)).mean()
    return sums.sum() / (normalization_constant or m.sum())
