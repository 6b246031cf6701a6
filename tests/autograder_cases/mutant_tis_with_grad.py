"""Mutant: the TIS weights computed outside torch.no_grad(), so they carry gradient into the loss."""
from _impl import build

globals().update(build())


def truncated_importance_weights(old_log_probs, sampler_log_probs, cap, response_mask=None):
    weights = (old_log_probs - sampler_log_probs).exp().clamp(max=cap)
    return weights if response_mask is None else weights * response_mask
