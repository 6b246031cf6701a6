"""Stage 2 — scoring: per-token log-probabilities and entropies of the labels under a causal LM.

For logits z ∈ R^V at one position and label y:
  log π(y) = z_y − logsumexp(z)                      (gather, then normalize: no (B, T, V) log-softmax)
  H(π)     = logsumexp(z) − Σ_v softmax(z)_v · z_v   (the stable form of −Σ p log p)
Half-precision logits are upcast to float32 first: bf16 has 8 mantissa bits, so a log-ratio near
GSPO's clip range (1 ± 3e-4) would round to 0. float32/float64 logits keep their dtype.

The chunked path runs the decoder once and then the output head over `logits_chunk_size`
positions of every row at a time (B · chunk rows, in one reused buffer), inside one autograd
Function whose backward recomputes each block's logits: peak extra memory is one (B, chunk, V)
block rather than (B, T, V), and nothing of the size of the logits is saved for backward (only the
hidden states and one log-normalizer per position). It bypasses the model's own forward, so it is
allowed only for architectures whose logits are exactly `lm_head(decoder(x))` with a bias-free
head (no logit scaling or soft-capping): OLMo2 (the course's model), Llama and Qwen2. The same idea:
Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024, arXiv 2410.10989) and Cut
Cross-Entropy (Wijmans et al. 2024, arXiv 2411.09009).
"""

from __future__ import annotations

import torch

# Architectures whose causal-LM forward is exactly lm_head(model(input_ids).last_hidden_state).
CHUNKABLE_MODEL_TYPES = ("olmo2", "llama", "qwen2")  # each proven equal in tests/test_scoring.py
# Entropy is a logged metric; bound its softmax temporaries to this many bytes per block.
_ENTROPY_BLOCK_BYTES = 16 * 2**20


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis.

    Args:
        logits: (..., V) unnormalized scores; half precision is computed in float32.

    Returns:
        (...) entropies in nats, in float32 for half-precision input, else in the input dtype.
    """
    if logits.ndim < 1 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty last (vocabulary) axis, got shape {tuple(logits.shape)}")
    logits = _upcast(logits)
    log_normalizer = torch.logsumexp(logits, dim=-1)  # (...)
    probs = torch.softmax(logits, dim=-1)  # (..., V)
    # a −inf logit (a masked-out token) has p = 0 and contributes 0, not 0 · (−inf) = NaN
    expected_logit = torch.where(probs > 0, probs * logits, torch.zeros_like(probs)).sum(dim=-1)
    return log_normalizer - expected_logit


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
        compute = _upcast(logits)  # (B, T, V)
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
    """log softmax(h Wᵀ)[y] for N rows, one block of `rows` rows of logits at a time.

    forward, per block:  z = h Wᵀ (rows, V) in one reused buffer; keep log Z = logsumexp(z) (rows,);
                         out = z_y − log Z (and, if asked, H = log Z − Σ softmax(z)·z, no grad).
    backward, per block: recompute z in the buffer; G = g · (onehot(y) − exp(z − log Z)) in place;
                         ∂h = G W (rows, H), ∂W += Gᵀ h (V, H).
    Saved for backward: h (N, H), y (N,), log Z (N,) and W (the model's own weight), never logits.
    That is four head matmuls instead of three, but no (N, V) tensor is ever allocated, and a block
    small enough to stay in cache makes the softmax passes cheap. The same idea as Liger-Kernel's
    fused linear cross-entropy, with a per-token cotangent g (GRPO weighs each token by its advantage).
    """

    @staticmethod
    def forward(ctx, hidden, weight, labels, rows: int, want_entropy: bool):
        count, vocab = hidden.shape[0], weight.shape[0]
        compute_dtype = torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16) else hidden.dtype
        buffer = torch.empty(min(rows, count), vocab, dtype=compute_dtype, device=hidden.device)
        log_probs = torch.empty(count, dtype=compute_dtype, device=hidden.device)  # (N,)
        log_normalizer = torch.empty_like(log_probs)  # (N,)
        entropy = torch.empty_like(log_probs) if want_entropy else None
        for start in range(0, count, rows):
            block = slice(start, start + rows)
            z = _block_logits(hidden[block], weight, buffer)  # (r, V)
            label_logit = z.gather(1, labels[block, None])[:, 0]  # (r,)
            peak = z.amax(dim=1)  # (r,)
            z.sub_(peak[:, None])  # z − max: exp cannot overflow
            if want_entropy:
                # Σ p·z = Σ e·(z − max) / Σ e, with e = exp(z − max), as a batched dot (no temporary)
                shifted_exp = torch.exp(z)
                sum_exp = shifted_exp.sum(dim=1)
                weighted = torch.bmm(shifted_exp[:, None, :], z[:, :, None])[:, 0, 0]
                entropy[block] = sum_exp.log() - weighted / sum_exp
            else:
                sum_exp = z.exp_().sum(dim=1)
            log_normalizer[block] = peak + sum_exp.log()
            log_probs[block] = label_logit - log_normalizer[block]
        ctx.rows = rows
        ctx.save_for_backward(hidden, weight, labels, log_normalizer)
        if entropy is not None:
            ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, labels, log_normalizer = ctx.saved_tensors
        rows, (count, vocab) = ctx.rows, (hidden.shape[0], weight.shape[0])
        buffer = torch.empty(min(rows, count), vocab, dtype=log_normalizer.dtype, device=hidden.device)
        grad_hidden = torch.empty_like(hidden)  # (N, H)
        grad_weight = torch.zeros(weight.shape, dtype=log_normalizer.dtype, device=weight.device)  # (V, H)
        grad_log_probs = grad_log_probs.to(log_normalizer.dtype)
        for start in range(0, count, rows):
            block = slice(start, start + rows)
            g = grad_log_probs[block, None]  # (r, 1)
            grad_logits = _block_logits(hidden[block], weight, buffer)  # (r, V)
            grad_logits.sub_(log_normalizer[block, None]).exp_().mul_(-g)  # −g · softmax
            grad_logits.scatter_add_(1, labels[block, None], g)  # + g · onehot(y)
            grad_logits = grad_logits.to(hidden.dtype)
            torch.mm(grad_logits, weight, out=grad_hidden[block])
            if hidden.dtype == grad_weight.dtype:
                grad_weight.addmm_(grad_logits.t(), hidden[block])
            else:  # half precision: each block's product in its dtype, the sum over blocks in float32
                grad_weight.add_(grad_logits.t() @ hidden[block])
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None


def _block_logits(hidden: torch.Tensor, weight: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """hidden Wᵀ (r, H) → (r, V), written into `buffer` (upcast there from half precision)."""
    out = buffer[: hidden.shape[0]]
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
        log_probs, entropy = _ChunkedHeadLogProb.apply(
            hidden.reshape(batch * positions, -1), head.weight, labels.reshape(-1), batch * chunk,
            return_token_entropy)
        log_probs = log_probs.view(batch, positions)
        entropy = entropy.view(batch, positions) if return_token_entropy else None

    result = {"log_probs": log_probs}
    if return_token_entropy:
        result["token_entropy"] = entropy
    return result
