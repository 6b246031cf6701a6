"""Stage 2 — scoring: per-token log-probabilities and entropies of the labels under a causal LM.

For logits z ∈ R^V at one position and label y:
  log π(y) = z_y − logsumexp(z)                      (gather, then normalize: no (B, T, V) log-softmax)
  H(π)     = logsumexp(z) − Σ_v softmax(z)_v · z_v   (the stable form of −Σ p log p)
Half-precision logits are upcast to float32 first: bf16 has 8 mantissa bits, so a log-ratio near
GSPO's clip range (1 ± 3e-4) would round to 0. float32/float64 logits keep their dtype.

The chunked path (`logits_chunk_size` > 0) is `course.chunked_head`: the output head tile by tile,
never the whole (B, T, V) logits.
"""

from __future__ import annotations

import torch

from course.chunked_head import chunked_head_log_probs

# Entropy is a logged metric; bound its softmax temporaries to this many bytes per block.
_ENTROPY_BLOCK_BYTES = 16 * 2**20


def upcast_half(x: torch.Tensor) -> torch.Tensor:
    """float16/bfloat16 → float32; float32 and float64 keep their dtype."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


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


def _entropy_without_grad(logits: torch.Tensor) -> torch.Tensor:
    """compute_entropy over (B, T, V) in blocks of positions, with no autograd graph."""
    batch, positions, vocab = logits.shape
    bytes_per_position = max(1, batch * vocab * 4)
    block = max(1, _ENTROPY_BLOCK_BYTES // bytes_per_position)
    with torch.no_grad():
        return torch.cat(
            [compute_entropy(logits[:, s : s + block]) for s in range(0, positions, block)], dim=1
        )


class _LabelLogProb(torch.autograd.Function):
    """log softmax(z)[y] = z_y − logsumexp(z), with a one-buffer backward.

    Autograd through `gather` and `logsumexp` keeps two (B, T, V) temporaries in backward (the
    scattered one-hot and the softmax); here ∂/∂z = g · (onehot(y) − softmax(z)) is built in a single
    (B, T, V) buffer, so the plain path peaks no higher than a full log_softmax would.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        compute = upcast_half(logits)  # (B, T, V)
        log_normalizer = torch.logsumexp(compute, dim=-1)  # (B, T)
        label_logits = compute.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)  # (B, T)
        ctx.save_for_backward(logits, labels, log_normalizer)
        return label_logits - log_normalizer

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        logits, labels, log_normalizer = ctx.saved_tensors
        compute_dtype = log_normalizer.dtype
        grad = logits.to(compute_dtype, copy=True)  # (B, T, V), the one buffer
        grad.sub_(log_normalizer.unsqueeze(-1)).exp_()  # softmax
        grad.mul_(-grad_output.unsqueeze(-1))  # −g · softmax
        grad.scatter_add_(-1, labels.unsqueeze(-1), grad_output.unsqueeze(-1).to(compute_dtype))  # + g · onehot
        return grad.to(logits.dtype), None


def _label_log_probs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[labels] without a (B, T, V) log-softmax: (B, T, V), (B, T) → (B, T)."""
    return _LabelLogProb.apply(logits, labels)


def _score_logits(logits: torch.Tensor, labels: torch.Tensor, return_token_entropy: bool):
    log_probs = _label_log_probs(logits, labels)
    if not return_token_entropy:
        return log_probs, None
    return log_probs, _entropy_without_grad(logits.detach())


def _resolve_chunk_size(model, logits_chunk_size) -> int:
    if logits_chunk_size is None:
        logits_chunk_size = getattr(getattr(model, "config", None), "grpo_logits_chunk_size", 0)
    if isinstance(logits_chunk_size, bool) or not isinstance(logits_chunk_size, int):
        raise ValueError(
            f"logits_chunk_size must be a non-negative int or None, got {logits_chunk_size!r}"
        )
    if logits_chunk_size < 0:
        raise ValueError(f"logits_chunk_size must be >= 0, got {logits_chunk_size}")
    return logits_chunk_size


def get_response_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    return_token_entropy: bool = False,
    logits_chunk_size: int | None = None,
) -> dict[str, torch.Tensor]:
    """Per-token log π(labels | input_ids) from a causal LM, optionally chunking the output head.

    Args:
        model: a Hugging Face causal LM (`model(input_ids).logits` is (B, T, V)).
        input_ids: (B, T) long token ids (right padding is fine: attention is causal).
        labels: (B, T) long next-token ids.
        return_token_entropy: also return per-position entropy, computed without autograd.
        logits_chunk_size: positions per output-head call; 0 = plain forward; None reads
            `model.config.grpo_logits_chunk_size` (default 0).

    Returns:
        dict with `log_probs` (B, T) and, if asked, `token_entropy` (B, T); float32 for half-precision
        models, else the model's dtype.
    """
    if input_ids.ndim != 2 or labels.shape != input_ids.shape:
        raise ValueError(
            f"input_ids and labels must both be (B, T), got {tuple(input_ids.shape)} and "
            f"{tuple(labels.shape)}"
        )
    chunk = _resolve_chunk_size(model, logits_chunk_size)
    if chunk == 0:
        log_probs, entropy = _score_logits(model(input_ids).logits, labels, return_token_entropy)
    else:
        log_probs, entropy = chunked_head_log_probs(model, input_ids, labels, chunk, return_token_entropy)

    result = {"log_probs": log_probs}
    if return_token_entropy:
        result["token_entropy"] = entropy
    return result
