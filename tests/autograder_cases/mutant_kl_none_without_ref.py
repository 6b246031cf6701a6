"""Mutant: kl returned as None when there is no reference model, instead of zeros."""
from _impl import build

globals().update(build())
_correct = compute_grpo_loss  # noqa: F821  (defined by the update above)


def compute_grpo_loss(new_logprobs, ratio, advantages, ref_logprobs, config, tis_weights=None):
    pg1, pg2, pg_max, kl = _correct(new_logprobs, ratio, advantages, ref_logprobs, config, tis_weights)
    return pg1, pg2, pg_max, (None if ref_logprobs is None else kl)
