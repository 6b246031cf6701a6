"""Mutant: aggregation selects with torch.where (nothing leaks), but divides each sequence's sum by
its count unclamped: the sequence without response tokens is 0/0 = nan."""
import torch
from _impl import build

globals().update(build())
_aggregate = aggregate_loss_across_microbatch  # noqa: F821  (bound by build() above)


def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                     normalization_constant=None):
    if loss_normalization != "sequence":
        return _aggregate(per_token_policy_gradient_loss, mask, loss_normalization, normalization_constant)
    kept = torch.where(mask.bool(), per_token_policy_gradient_loss, 0)
    return (kept.sum(1) / mask.sum(1)).mean()
