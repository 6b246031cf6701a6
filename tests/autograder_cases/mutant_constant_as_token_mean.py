"""Mutant: Dr. GRPO's constant mode divides by the token count instead of normalization_constant."""
from _impl import build

globals().update(build())
_correct = aggregate_loss_across_microbatch  # noqa: F821  (defined by the update above)


def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                     normalization_constant=None):
    if loss_normalization == "constant":
        return _correct(per_token_policy_gradient_loss, mask, "token")
    return _correct(per_token_policy_gradient_loss, mask, loss_normalization, normalization_constant)
