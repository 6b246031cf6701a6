"""Mutant: the entropy computed in the logits' own dtype, so bfloat16 logits give bfloat16 entropy."""
import torch
from _impl import build

globals().update(build())


def compute_entropy(logits):
    log_p = logits - torch.logsumexp(logits, -1, keepdim=True)
    return -(log_p.exp() * log_p).sum(-1)
