"""Stage 2 — scoring: per-token log-probabilities and entropies of the labels under a causal LM.

For logits z ∈ R^V at one position and label y:
  log π(y) = z_y − logsumexp(z)                      (gather, then normalize: no (B, T, V) log-softmax)
  H(π)     = logsumexp(z) − Σ_v softmax(z)_v · z_v   (the stable form of −Σ p log p)
Half-precision logits are upcast to float32 first: bf16 has 8 mantissa bits, so a log-ratio near
GSPO's clip range (1 ± 3e-4) would round to 0. float32/float64 logits keep their dtype.

The chunked path runs the decoder once and then the output head tile by tile, holding at most
the logits of one (B, `logits_chunk_size`, V) block at a time, inside one autograd Function whose
backward recomputes each tile's logits: nothing of the size of the logits is saved for backward
(only the hidden states and one log-normalizer per position). It bypasses the model's own
forward, so it is allowed only for architectures whose logits are exactly `lm_head(decoder(x))`
with a bias-free head (no logit scaling or soft-capping): OLMo2 (the course's model), Llama and
Qwen2. The same idea: Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024, arXiv 2410.10989) and Cut
Cross-Entropy (Wijmans et al. 2024, arXiv 2411.09009).
"""

from __future__ import annotations

import torch

# Architectures whose causal-LM forward is exactly lm_head(model(input_ids).last_hidden_state).
CHUNKABLE_MODEL_TYPES = ("olmo2", "llama", "qwen2")  # each proven equal in tests/test_scoring.py
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


class _ChunkedHeadLogProb(torch.autograd.Function):
    """log softmax(h Wᵀ)[y] for N rows, never holding more than `budget` logits at once.

    The logits are visited in tiles of (rows, vocabulary slice) with rows · slice <= budget; a
    softmax over the vocabulary is then a running one (Milakov & Gimelshein 2018, arXiv 1805.02867):
      forward:  per tile z = h Wₜᵀ; running max m, Σ exp(z − m), and the label's logit; at the end
                log Z = m + log Σ, out = z_y − log Z (and H = log Z − Σ softmax(z)·z, no grad).
      backward: per tile recompute z; G = g · (onehot(y) − exp(z − log Z)) in place;
                ∂Wₜ = Gᵀ h (written once per tile), ∂h += G Wₜ.
    Saved for backward: h (N, H), y (N,), log Z (N,) and W (the model's own weight), never logits.
    Tiling the vocabulary rather than the positions keeps every matmul large (all rows at once)
    and writes each slice of ∂W once instead of adding a (V, H) product per block of positions.
    The same idea as Liger-Kernel's fused linear cross-entropy, with a per-token cotangent g (GRPO
    weighs each token by its advantage).
    """

    @staticmethod
    def forward(ctx, hidden, weight, labels, budget: int, want_entropy: bool):
        count, vocab = hidden.shape[0], weight.shape[0]
        compute_dtype = torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16) else hidden.dtype
        rows, width = _tile_shape(count, vocab, budget)
        buffer = torch.empty(rows * width, dtype=compute_dtype, device=hidden.device)
        log_normalizer = torch.empty(count, dtype=compute_dtype, device=hidden.device)  # (N,)
        log_probs = torch.empty_like(log_normalizer)  # (N,)
        entropy = torch.empty_like(log_normalizer) if want_entropy else None
        for start in range(0, count, rows):
            block, y = slice(start, start + rows), labels[start:start + rows]
            peak = sum_exp = weighted = None  # running max, Σ exp(z − max), Σ exp(z − max)·(z − max)
            for first in range(0, vocab, width):
                z = _block_logits(hidden[block], weight[first:first + width], buffer)  # (r, w)
                in_tile = (y >= first) & (y < first + z.shape[1])
                if bool(in_tile.any()):
                    label_rows = in_tile.nonzero()[:, 0]
                    log_probs[start + label_rows] = z[label_rows, y[label_rows] - first]
                tile_peak = z.amax(dim=1)
                new_peak = tile_peak if peak is None else torch.maximum(peak, tile_peak)
                z.sub_(new_peak[:, None])  # z − max: exp cannot overflow
                tile_exp = torch.exp(z) if want_entropy else z.exp_()
                tile_sum = tile_exp.sum(dim=1)
                if want_entropy:
                    tile_weighted = torch.bmm(tile_exp[:, None, :], z[:, :, None])[:, 0, 0]  # Σ e·(z − max)
                if peak is None:
                    sum_exp, weighted = tile_sum, tile_weighted if want_entropy else None
                else:
                    scale, shift = torch.exp(peak - new_peak), new_peak - peak
                    if want_entropy:  # re-express the old Σ e·(z − max) relative to the new max
                        weighted = scale * (weighted - shift * sum_exp) + tile_weighted
                    sum_exp = scale * sum_exp + tile_sum
                peak = new_peak
            log_normalizer[block] = peak + sum_exp.log()
            log_probs[block] -= log_normalizer[block]
            if want_entropy:
                entropy[block] = sum_exp.log() - weighted / sum_exp
        ctx.budget = budget
        ctx.save_for_backward(hidden, weight, labels, log_normalizer)
        if entropy is not None:
            ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, labels, log_normalizer = ctx.saved_tensors
        count, vocab = hidden.shape[0], weight.shape[0]
        rows, width = _tile_shape(count, vocab, ctx.budget)
        compute_dtype = log_normalizer.dtype
        buffer = torch.empty(rows * width, dtype=compute_dtype, device=hidden.device)
        grad_hidden = torch.zeros(hidden.shape, dtype=compute_dtype, device=hidden.device)  # (N, H)
        grad_weight = torch.zeros(weight.shape, dtype=compute_dtype, device=weight.device)  # (V, H)
        grad_log_probs = grad_log_probs.to(compute_dtype)
        for start in range(0, count, rows):
            block, y = slice(start, start + rows), labels[start:start + rows]
            g = grad_log_probs[block, None]  # (r, 1)
            for first in range(0, vocab, width):
                tile = slice(first, first + width)
                grad_logits = _block_logits(hidden[block], weight[tile], buffer)  # (r, w)
                grad_logits.sub_(log_normalizer[block, None]).exp_().mul_(-g)  # −g · softmax
                in_tile = (y >= first) & (y < first + grad_logits.shape[1])
                if bool(in_tile.any()):  # + g · onehot(y)
                    label_rows = in_tile.nonzero()[:, 0]
                    grad_logits[label_rows, y[label_rows] - first] += g[label_rows, 0]
                grad_logits = grad_logits.to(hidden.dtype)
                grad_weight[tile].add_((grad_logits.t() @ hidden[block]).to(compute_dtype))
                grad_hidden[block].add_((grad_logits @ weight[tile]).to(compute_dtype))
        return grad_hidden.to(hidden.dtype), grad_weight.to(weight.dtype), None, None, None


# Rows per tile at most: all B · T positions of a usual batch at once, so the matmuls stay large.
_MAX_TILE_ROWS = 4096


def _tile_shape(count: int, vocab: int, budget: int) -> tuple[int, int]:
    """(rows, vocabulary slice) of one tile of logits: rows · slice <= max(budget, 1)."""
    rows = max(1, min(count, _MAX_TILE_ROWS, budget))
    return rows, max(1, min(vocab, budget // rows))


def _block_logits(hidden: torch.Tensor, weight: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """hidden Wᵀ (r, H) x (w, H) → (r, w), written into the flat `buffer` (upcast from half precision)."""
    out = buffer[: hidden.shape[0] * weight.shape[0]].view(hidden.shape[0], weight.shape[0])
    if hidden.dtype == buffer.dtype:
        return torch.mm(hidden, weight.t(), out=out)
    return out.copy_(hidden @ weight.t())


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


def _decoder_and_head(model):
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise ValueError(
            "logits_chunk_size > 0 bypasses the model's forward, which DistributedDataParallel needs "
            "to synchronize gradients; use logits_chunk_size=0 with a DDP-wrapped model"
        )
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    decoder = getattr(model, "model", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if (model_type not in CHUNKABLE_MODEL_TYPES or not isinstance(decoder, torch.nn.Module)
            or not isinstance(head, torch.nn.Linear) or head.bias is not None):
        raise ValueError(
            f"logits_chunk_size > 0 needs a model whose logits are exactly lm_head(model.model(x)) "
            f"({', '.join(CHUNKABLE_MODEL_TYPES)}); got model_type={model_type!r}. "
            "Use logits_chunk_size=0 for other architectures."
        )
    return decoder, head


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
        decoder, head = _decoder_and_head(model)
        hidden = decoder(input_ids=input_ids, use_cache=False).last_hidden_state  # (B, T, H)
        batch, positions = labels.shape
        budget = batch * chunk * head.weight.shape[0]  # logits of one (B, chunk, V) block, at most
        log_probs, entropy = _ChunkedHeadLogProb.apply(
            hidden.reshape(batch * positions, -1), head.weight, labels.reshape(-1), budget, return_token_entropy)
        log_probs = log_probs.view(batch, positions)
        entropy = entropy.view(batch, positions) if return_token_entropy else None

    result = {"log_probs": log_probs}
    if return_token_entropy:
        result["token_entropy"] = entropy
    return result
