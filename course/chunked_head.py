"""Chunked scoring: log π(y) through the output head tile by tile, never the whole (B, T, V) logits.

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


def chunked_head_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int,
    return_token_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(labels | input_ids) (B, T), and the entropy (B, T) if asked, holding at most the logits
    of one (B, chunk_size, V) block at a time. `model` must be one of CHUNKABLE_MODEL_TYPES."""
    decoder, head = _decoder_and_head(model)
    hidden = decoder(input_ids=input_ids, use_cache=False).last_hidden_state  # (B, T, H)
    batch, positions = labels.shape
    budget = batch * chunk_size * head.weight.shape[0]  # logits of one (B, chunk, V) block, at most
    log_probs, entropy = _ChunkedHeadLogProb.apply(
        hidden.reshape(batch * positions, -1), head.weight, labels.reshape(-1), budget, return_token_entropy
    )
    return log_probs.view(batch, positions), entropy.view(batch, positions) if return_token_entropy else None
