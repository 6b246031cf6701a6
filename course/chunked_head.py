"""Chunked scoring: log π(y) through the output head tile by tile, never the whole (B, T, V) logits.

The chunked path runs the decoder once and then the output head tile by tile, holding at most
the logits of one (B, `logits_chunk_size`, V) block at a time, inside one autograd Function whose
backward recomputes each tile's logits: nothing of the size of the logits is saved for backward
(only the hidden states and one log-normalizer per position). It bypasses the model's own
forward, so it is allowed only for architectures whose logits are exactly `lm_head(decoder(x))`
with a bias-free head (no logit scaling or soft-capping): OLMo2 (the course's model), Llama and
Qwen2. The same idea: Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024, arXiv 2410.10989)
and Cut Cross-Entropy (Wijmans et al. 2024, arXiv 2411.09009).
"""

from __future__ import annotations

import torch

# Architectures whose causal-LM forward is exactly lm_head(model(input_ids).last_hidden_state).
CHUNKABLE_MODEL_TYPES = ("olmo2", "llama", "qwen2")  # each proven equal in tests/test_scoring.py


class _ChunkedHeadLogProb(torch.autograd.Function):
    """log softmax(h Wᵀ)[y] for N rows, never holding more than `budget` logits at once.

    The logits are visited in tiles of (rows, vocabulary slice) with rows · slice <= budget; a
    softmax over the vocabulary is then a running one (Milakov & Gimelshein 2018, arXiv 1805.02867):
      forward:  per tile z − c in one matmul, c = the first tile's max (moved up only where
                Σ exp(z − c) passes 2^16 or exp would overflow); Σ exp(z − c) with exp in place,
                z_y read before; then
                log Z = c + log Σ, out = z_y − log Z (and H = log Σ − Σ e·(z − c) / Σ, no grad).
      backward: per tile P = exp(z − log Z) in place, the only pass over the tile; the cotangent
                g and the one-hot are applied outside it, on (N, H) and (V, H) operands:
                ∂Wₜ = Pᵀ (−g ⊙ h), ∂h = g ⊙ (W[y] − Σₜ P Wₜ), then ∂W[y] += g ⊙ h.
    Saved for backward: h (as the tiles' rows [h, ·], N x (H + 1); in half precision h itself), y
    (N,), log Z (N,) and W (the model's own weight), never logits; h is not copied again in
    backward. Tiling the vocabulary rather than the positions keeps every matmul large (all rows at
    once) and writes each slice of ∂W once instead of adding a (V, H) product per block of
    positions. The same idea as Liger-Kernel's fused linear cross-entropy, with a per-token
    cotangent g (GRPO weighs each token by its advantage).
    """

    @staticmethod
    def forward(ctx, hidden, weight, labels, budget: int, want_entropy: bool):
        count, vocab = hidden.shape[0], weight.shape[0]
        rows, width = _tile_shape(count, vocab, budget)
        tiles = _TileLogits(_tile_rows(hidden, weight), weight, rows, width, _compute_dtype(hidden))
        log_normalizer = torch.empty(count, dtype=tiles.dtype, device=hidden.device)  # (N,)
        log_probs = torch.empty_like(log_normalizer)  # (N,)
        entropy = torch.empty_like(log_normalizer) if want_entropy else None
        for start in range(0, count, rows):
            block = slice(start, start + rows)
            tiles.set_rows(block)
            log_normalizer[block], log_probs[block], block_entropy = _running_softmax(
                tiles, weight, labels[block], want_entropy)
            if want_entropy:
                entropy[block] = block_entropy
        ctx.budget = budget
        # the tiles' rows (N, H + 1) in place of h: backward reads h from them, and no copy of h is
        # made
        ctx.save_for_backward(tiles.source, weight, labels, log_normalizer)
        if entropy is not None:
            ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_log_probs, grad_entropy):
        source, weight, labels, log_normalizer = ctx.saved_tensors
        count, vocab = source.shape[0], weight.shape[0]
        hidden = source[:, : weight.shape[1]]  # (N, H) h, a view
        rows, width = _tile_shape(count, vocab, ctx.budget)
        tiles = _TileLogits(source, weight, rows, width, log_normalizer.dtype)
        g = grad_log_probs.to(tiles.dtype)[:, None]  # (N, 1)
        grad_hidden = torch.empty(hidden.shape, dtype=tiles.dtype, device=hidden.device)  # (N, H)
        grad_weight = torch.empty(weight.shape, dtype=tiles.dtype, device=weight.device)  # (V, H)
        for start in range(0, count, rows):
            block = slice(start, start + rows)
            tiles.set_rows(block)
            scaled_hidden = (-g[block] * hidden[block]).to(hidden.dtype)  # (r, H) −g ⊙ h
            for first in range(0, vocab, width):
                tile = slice(first, first + width)
                # (r, w) softmax
                probs = tiles(weight[tile], log_normalizer[block]).exp_().to(hidden.dtype)
                _matmul_into(grad_weight[tile], probs.t(), scaled_hidden, accumulate=start > 0)
                _matmul_into(grad_hidden[block], probs, weight[tile], accumulate=first > 0)
        del tiles, scaled_hidden  # before the one-hot part's (N, H) temporaries: a lower peak
        # the one-hot part: ∂h = g ⊙ (W[y] − Σ P W), ∂W[y] += g ⊙ h (index_add_ sums repeated
        # labels)
        grad_hidden.neg_().add_(weight[labels]).mul_(g)
        grad_weight.index_add_(0, labels, g * hidden)
        return grad_hidden.to(hidden.dtype), grad_weight.to(weight.dtype), None, None, None


def _running_softmax(tiles: _TileLogits, weight: torch.Tensor, labels: torch.Tensor,
                     want_entropy: bool):
    """log Z = log Σ_v exp(z_v), log p(y) = z_y − log Z and, if asked, H = −Σ p log p (else None),
    each (r,), for the rows set on `tiles`, one vocabulary slice at a time.

    Sums are kept relative to a shift c, the first slice's max: exp(z − c) for later slices needs
    no max. c moves up (rescaling the sums) only where Σ exp(z − c) passes 2^16, for precision,
    or where a slice's exp would overflow, which redoes that slice.
    """
    vocab, width = weight.shape[0], tiles.width
    # (r,) z_y − c
    label_logits = torch.empty(labels.shape[0], dtype=tiles.dtype, device=labels.device)
    shift = mass = spread = None  # c, Σ exp(z − c), Σ exp(z − c)(z − c)
    for first, (rows, columns) in zip(range(0, vocab, width), _labels_by_tile(labels, vocab,
                                                                              width)):
        head = weight[first:first + width]
        z = tiles(head, shift)  # (r, w) z − c
        label_logits[rows] = z[rows, columns]
        if shift is None:  # the first slice: c = its max
            shift = z.amax(dim=1)
            z.sub_(shift[:, None])
            label_logits.sub_(shift)
            mass, spread = _exp_sums(z, want_entropy)
            continue
        tile_mass, tile_spread = _exp_sums(z, want_entropy)  # Σ exp(z − c), Σ exp(z − c)(z − c)
        if not bool(torch.isfinite(mass + tile_mass).all()):  # a logit ~88 above c (float32)
            z = tiles(head, shift)  # exp overwrote it: redo it relative to this slice's max
            by = torch.maximum(z.amax(dim=1), mass.log())  # (r,)
            z.sub_(by[:, None])
            tile_mass, tile_spread = _exp_sums(z, want_entropy)
            shift, mass, spread = _moved(shift, mass, spread, label_logits, by)
        mass = mass + tile_mass
        spread = spread + tile_spread if want_entropy else None
        if bool((mass > 2**16).any()):
            by = torch.where(mass > 2**16, mass.log(), 0)
            shift, mass, spread = _moved(shift, mass, spread, label_logits, by)
    log_mass = mass.log()
    entropy = log_mass - spread / mass if want_entropy else None
    return shift + log_mass, label_logits - log_mass, entropy


def _moved(shift, mass, spread, label_logits, by):
    """The running sums relative to c + by instead of c (by ≥ 0, (r,)); label_logits in place."""
    # Σ exp(z − c − by) = e^−by Σ exp(z − c), and likewise with the factor z − c − by
    scale = torch.exp(-by)
    label_logits.sub_(by)
    return shift + by, scale * mass, None if spread is None else scale * (spread - by * mass)


# Rows per tile at most: all B · T positions of a usual batch at once, so the matmuls stay large.
_MAX_TILE_ROWS = 4096


def _tile_shape(count: int, vocab: int, budget: int) -> tuple[int, int]:
    """(rows, vocabulary slice) of one tile of logits: rows · slice <= max(budget, 1)."""
    rows = max(1, min(count, _MAX_TILE_ROWS, budget))
    return rows, max(1, min(vocab, budget // rows))


def _compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    return torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16) else hidden.dtype


def _tile_rows(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """What the tiles' matmul reads for the rows: [h, −c] (N, H + 1) where the shift rides in it
    (`_TileLogits`), else h itself (N, H)."""
    if weight.dtype != _compute_dtype(hidden):
        return hidden
    rows = torch.empty(hidden.shape[0], hidden.shape[1] + 1, dtype=hidden.dtype,
                       device=hidden.device)
    rows[:, :-1].copy_(hidden)
    return rows


class _TileLogits:
    """One tile of logits minus a per-row shift, h Wₜᵀ − c (r, w), in one reused buffer.

    In float32 and float64 the shift rides in the matmul as one more inner dimension,
    [h, −c] · [Wₜ, 1]ᵀ, so no pass over the tile subtracts it; `source` is then [h, ·] for all N
    rows (`_tile_rows`), made once in forward and saved for backward in place of h. Half-precision
    logits are rounded like the model's own head (a half matmul), then upcast and shifted in
    float32.
    """

    def __init__(self, source: torch.Tensor, weight: torch.Tensor, rows: int, width: int,
                 dtype: torch.dtype):
        self.source, self.dtype, self.width = source, dtype, width  # source: (N, H + 1) or (N, H)
        self.fused = source.shape[1] > weight.shape[1]  # [h, ·]: the shift rides in the matmul
        self.buffer = torch.empty(rows * width, dtype=dtype, device=weight.device)
        if self.fused:
            # [Wₜ, 1]
            self.weight_and_one = torch.ones(width, source.shape[1], dtype=dtype,
                                             device=weight.device)

    def set_rows(self, block: slice) -> None:
        self.rows = self.source[block]  # (r, H + 1) [h, −c], or (r, H)
        self.hidden = self.rows[:, :-1] if self.fused else self.rows  # (r, H)

    def __call__(self, weight: torch.Tensor, shift: torch.Tensor | None) -> torch.Tensor:
        return _block_logits(self, weight, shift)


def _block_logits(tiles: _TileLogits, weight: torch.Tensor,
                  shift: torch.Tensor | None) -> torch.Tensor:
    """h Wₜᵀ − shift for the rows set on `tiles`: (w, H), (r,) or None for 0 → (r, w)."""
    rows, width = tiles.hidden.shape[0], weight.shape[0]
    out = tiles.buffer[: rows * width].view(rows, width)
    if not tiles.fused:
        out.copy_(tiles.hidden @ weight.t())
        return out if shift is None else out.sub_(shift[:, None])
    hidden = tiles.rows  # (r, H + 1)
    if shift is None:
        hidden[:, -1] = 0
    else:
        torch.neg(shift, out=hidden[:, -1])
    tile = tiles.weight_and_one[:width]
    tile[:, :-1].copy_(weight)
    return torch.mm(hidden, tile.t(), out=out)


def _exp_sums(z: torch.Tensor, want_entropy: bool):
    """Σ exp(z) per row, and Σ exp(z) · z if `want_entropy` (else None); exp in place when it
    can."""
    if not want_entropy:
        return z.exp_().sum(dim=1), None
    exp = torch.exp(z)
    return exp.sum(dim=1), torch.bmm(exp[:, None, :], z[:, :, None])[:, 0, 0]


def _labels_by_tile(labels: torch.Tensor, vocab: int, width: int) -> list[tuple[torch.Tensor,
                                                                                torch.Tensor]]:
    """For each vocabulary slice of `width`, the rows whose label falls in it and its column
    there."""
    order = labels.argsort()
    firsts = torch.arange(0, vocab + width, width, device=labels.device).clamp_max(vocab)
    bounds = torch.searchsorted(labels[order], firsts).tolist()
    return [(order[a:b], labels[order[a:b]] - first) for first, a, b in zip(firsts.tolist(), bounds,
                                                                            bounds[1:])]


def _matmul_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, accumulate: bool) -> None:
    """out (+)= a @ b, without a temporary when the dtypes agree."""
    if a.dtype != out.dtype:
        product = (a @ b).to(out.dtype)
        out.add_(product) if accumulate else out.copy_(product)
    elif accumulate:
        out.addmm_(a, b)
    else:
        torch.mm(a, b, out=out)


def _decoder_and_head(model):
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise ValueError(
            "logits_chunk_size > 0 bypasses the model's forward, which DistributedDataParallel "
            "needs "
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
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(labels | input_ids) (B, T), and the entropy (B, T) if asked, holding at most the logits
    of one (B, chunk_size, V) block at a time. `model` must be one of CHUNKABLE_MODEL_TYPES.
    At temperature τ the logits are W h / τ = W (h / τ) (the head has no bias): h is divided."""
    decoder, head = _decoder_and_head(model)
    vocab = head.weight.shape[0]
    if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < vocab:
        raise ValueError(f"labels must lie in [0, {vocab}) (the head's vocabulary), got "
                         f"[{int(labels.min())}, {int(labels.max())}]")
    hidden = decoder(input_ids=input_ids, use_cache=False).last_hidden_state  # (B, T, H)
    if temperature != 1:
        hidden = hidden / temperature
    batch, positions = labels.shape
    budget = batch * chunk_size * head.weight.shape[0]  # logits of one (B, chunk, V) block, at most
    log_probs, entropy = _ChunkedHeadLogProb.apply(
        hidden.reshape(batch * positions, -1), head.weight, labels.reshape(-1), budget,
        return_token_entropy
    )
    return log_probs.view(batch, positions), entropy.view(
        batch, positions
    ) if return_token_entropy else None
