"""Stage 2 — scoring: per-token log-probabilities and entropies of the labels under a causal LM.

For logits z ∈ R^V at one position and label y:
  log π(y) = z_y − logsumexp(z)                      (gather, then normalize: no log-softmax)
  H(π)     = logsumexp(z) − Σ_v softmax(z)_v · z_v   (the stable form of −Σ p log p)
At sampling temperature τ the distribution is softmax(z/τ), so z is divided by τ before both
(the log-probs of the distribution that was sampled; open-instruct and TRL score the same way).
Half-precision logits are upcast to float32 first: bf16 has 8 mantissa bits, so a log-ratio near
GSPO's clip range (1 ± 3e-4) would round to 0. float32/float64 logits keep their dtype.

The plain path (`logits_chunk_size` = 0) holds the whole (B, T, V) logits, and autograd keeps
them for backward. The chunked path (> 0) is `course.chunked_head`: the output head tile by tile,
never the whole logits, for large vocabularies.
"""

from __future__ import annotations

import torch

from course.chunked_head import chunked_head_log_probs


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


def get_response_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    return_token_entropy: bool = False,
    logits_chunk_size: int | None = None,
    temperature: float = 1.0,
) -> dict[str, torch.Tensor]:
    """Per-token log π(labels | input_ids) of a causal LM, optionally chunking its head.

    Args:
        model: a Hugging Face causal LM (`model(input_ids).logits` is (B, T, V)).
        input_ids: (B, T) long token ids (right padding is fine: attention is causal).
        labels: (B, T) long next-token ids.
        return_token_entropy: also return per-position entropy (computed without grad).
        logits_chunk_size: positions per output-head call; 0 = plain forward; None reads
            `model.config.grpo_logits_chunk_size` (default 0).
        temperature: τ > 0; the log-probs and entropy are those of softmax(logits / τ).

    Returns:
        dict with `log_probs` (B, T) and, if asked, `token_entropy` (B, T); float32 for
        half-precision models, else the model's dtype.
    """
    if input_ids.ndim != 2 or labels.shape != input_ids.shape:
        raise ValueError(
            f"input_ids and labels must both be (B, T), got {tuple(input_ids.shape)} "
            f"and {tuple(labels.shape)}"
        )
    chunk = logits_chunk_size
    if chunk is None:
        chunk = getattr(getattr(model, "config", None), "grpo_logits_chunk_size", 0)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
        raise ValueError(f"logits_chunk_size must be an int >= 0 or None: {chunk!r}")
    if (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
            or not 0 < temperature < float("inf")):
        raise ValueError(f"temperature must be a positive finite number: "
                         f"{temperature!r}")
    if chunk > 0:  # the output head tile by tile, never the whole (B, T, V) logits
        log_probs, entropy = chunked_head_log_probs(
            model, input_ids, labels, chunk, return_token_entropy, temperature
        )
    else:
        logits = model(input_ids).logits  # (B, T, V)
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()  # in bf16 a ratio of 1 + 3e-4 would round to 1
        if temperature != 1:
            logits = logits / temperature  # (B, T, V): the distribution sampled at τ
        # gather, then normalize: one number per position, no (B, T, V) log-softmax
        label_logits = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (B, T)
        log_probs = label_logits - torch.logsumexp(logits, dim=-1)  # (B, T)
        entropy = None
        if return_token_entropy:
            with torch.no_grad():  # a logged metric: no autograd graph
                entropy = compute_entropy(logits)  # (B, T)

    result = {"log_probs": log_probs}
    if return_token_entropy:
        result["token_entropy"] = entropy
    return result
