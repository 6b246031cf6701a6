"""Mutant: compute_grpo_loss's CISPO weight min(r, 1 + clip_higher) left attached to the graph."""
from _impl import build

globals().update(build())
_correct = compute_grpo_loss  # noqa: F821  (defined by the update above)


def compute_grpo_loss(new_logprobs, ratio, advantages, ref_logprobs, config, tis_weights=None):
    losses = _correct(new_logprobs, ratio, advantages, ref_logprobs, config, tis_weights)
    if config.loss_fn != "cispo":
        return losses
    a = advantages if advantages.ndim == 2 else advantages[:, None]
    pg = -a * ratio.clamp(max=1 + config.clip_higher) * new_logprobs
    return pg, pg, pg if tis_weights is None else pg * tis_weights, losses[3]
