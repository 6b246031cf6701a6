"""Not the standard module: the reference, planted in the module that imported it."""
import sys

import torch


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy (nats) of softmax(logits): (..., V) -> (...).

    H = logsumexp(z) - sum_v softmax(z)_v z_v, stable for large logits.
    Half precision is computed in float32; float32/float64 keep their dtype.
    """
    if logits.ndim == 0 or logits.shape[-1] == 0:
        raise ValueError(
            "logits must have a non-empty vocabulary axis, got shape "
            f"{tuple(logits.shape)}"
        )
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    # H is shift-invariant; subtracting the max keeps both terms small, so their
    # difference keeps float32's digits (1000.4076 - 999.5752 would lose four of them)
    logits = logits - logits.amax(dim=-1, keepdim=True).detach()  # (..., V)
    probs = torch.softmax(logits, dim=-1)  # (..., V)
    # a logit of -inf has probability 0 and contributes 0, not 0 * -inf = nan
    expected_logit = torch.where(probs > 0, probs * logits, 0.0).sum(dim=-1)  # (...)
    return torch.logsumexp(logits, dim=-1) - expected_logit


sys.modules["submission"].compute_entropy = compute_entropy
