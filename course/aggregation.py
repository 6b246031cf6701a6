"""Stage 6 — loss aggregation: turning per-token losses into the scalar we backpropagate.

Three normalizations, each a choice about how much a token weighs:
  sequence  (1/B) Σ_i (1/|o_i|) Σ_t ℓ_it      GRPO, Shao et al. 2024 (arXiv 2402.03300)
  token     (1/N) Σ_i Σ_t ℓ_it                DAPO, Yu et al. 2025 (arXiv 2503.14476)
  constant  (1/C) Σ_i Σ_t ℓ_it                Dr. GRPO, Liu et al. 2025 (arXiv 2503.20783)
B and N count the sequences and response tokens of the whole optimizer step: every micro-batch,
every data-parallel rank.

The gradient-accumulation bug: dividing each micro-batch's masked sum by its OWN token count n_k and
then by the number of micro-batches K gives a token in micro-batch k the weight 1/(K·n_k) instead of
1/N, so tokens in short micro-batches count more. open-instruct had it until PR #1161
(allenai/open-instruct, open_instruct/grpo_fast.py); transformers' Trainer had it until its
October 2024 fix. `calculate_loss_and_backward` divides by the step's N and multiplies by the world
size, because DistributedDataParallel averages gradients over ranks.
"""

from __future__ import annotations

import torch

from course.variants import LOSS_NORMALIZATIONS  # this stage's names, torch-free there


def masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """values·mask where the mask is non-zero and exactly 0 elsewhere, whatever `values` holds
    there.

    A plain `values * mask` leaks: 0·nan and 0·inf are nan, and padding may hold either (a log-prob
    of -inf, a ratio that overflowed). Selecting also keeps nan out of the gradient.
    """
    mask = mask.to(values.dtype)
    return torch.where(mask != 0, values * mask, torch.zeros((), dtype=values.dtype,
                                                             device=values.device))


def masked_mean(
    values: torch.Tensor, mask: torch.Tensor, dim: int | None = None,
    denominator: float | None = None
) -> torch.Tensor:
    """Σ values·mask / Σ mask over `dim` (all elements when None); 0 where the mask is empty.

    `denominator`, when given, replaces Σ mask (open-instruct's `masked_mean_denominator`).
    """
    if values.shape != mask.shape:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(mask.shape)} must have the "
                         "same shape")
    kept = masked(values, mask)
    mask = mask.to(values.dtype)
    total = kept.sum() if dim is None else kept.sum(dim=dim)
    if denominator is not None:
        if not denominator > 0:
            raise ValueError(f"denominator must be positive, got {denominator!r}")
        return total / denominator
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return total / count.clamp_min(1)


def aggregate_loss_across_microbatch(
    per_token_policy_gradient_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_normalization: str = "sequence",
    normalization_constant: float | None = None,
) -> torch.Tensor:
    """Reduce per-token losses (B, T) under a 0/1 `mask` (B, T) to a 0-dim loss.

    sequence  (1/B) Σ_i (1/|o_i|) Σ_t m_it ℓ_it   GRPO, arXiv 2402.03300
    token     (1/N) Σ_i Σ_t m_it ℓ_it             DAPO, arXiv 2503.14476 (N: whole step)
    constant  (1/C) Σ_i Σ_t m_it ℓ_it             Dr. GRPO, arXiv 2503.20783
    """
    loss = per_token_policy_gradient_loss
    if loss.ndim != 2:
        raise ValueError(
            f"per_token_policy_gradient_loss must be (B, T), got {tuple(loss.shape)}"
        )
    if mask.shape != loss.shape:
        raise ValueError(
            f"mask {tuple(mask.shape)} must match per_token_policy_gradient_loss "
            f"{tuple(loss.shape)}"
        )
    if loss_normalization not in LOSS_NORMALIZATIONS:
        raise ValueError(f"loss_normalization must be one of {LOSS_NORMALIZATIONS}, "
                         f"got {loss_normalization!r}")
    if normalization_constant is not None and not normalization_constant > 0:
        raise ValueError(
            f"normalization_constant must be positive, got {normalization_constant!r}"
        )
    if loss_normalization == "constant" and normalization_constant is None:
        raise ValueError("loss_normalization='constant' needs a normalization_constant")

    if loss.dtype in (torch.float16, torch.bfloat16):
        loss = loss.float()
    keep = mask.bool()  # (B, T)
    masked = torch.where(
        keep, loss, torch.zeros_like(loss)
    )  # padding cannot leak, not even nan
    if loss_normalization == "sequence":
        lengths = (
            keep.sum(dim=1).clamp_min(1).to(loss.dtype)
        )  # (B,) an empty row is 0 / 1
        return (masked.sum(dim=1) / lengths).mean()
    if normalization_constant is None:  # token mode, this batch is the step
        normalization_constant = keep.sum().clamp_min(1).to(loss.dtype)
    return masked.sum() / normalization_constant


def calculate_loss_and_backward(
    per_token_loss: torch.Tensor,
    response_mask: torch.Tensor,
    loss_normalization: str,
    step_sequence_count: int | torch.Tensor,
    step_token_count: int | torch.Tensor,
    normalization_constant: float | None = None,
    world_size: int = 1,
) -> torch.Tensor:
    """Normalize one micro-batch's per-token loss (b, T) as its share of the step's loss; backward.

    Summed over the micro-batches of every rank (and averaged over ranks by DDP), the gradients
    equal those of `aggregate_loss_across_microbatch` on the whole step's batch, whatever the split:
      sequence: Σ_{i∈mb} mean_t ℓ_it / B_step
      token:    Σ_{i∈mb} Σ_t ℓ_it / N_step
      constant: Σ_{i∈mb} Σ_t ℓ_it / C
    each times `world_size` to undo DDP's averaging.

    Args:
        per_token_loss: (b, T) this micro-batch's per-token loss (with gradient).
        response_mask: (b, T) 0/1.
        step_sequence_count: B_step, sequences in the whole step over all ranks (sequence mode).
        step_token_count: N_step, response tokens in the whole step over all ranks (token mode).
        normalization_constant: C (constant mode).
        world_size: data-parallel ranks whose gradients are averaged.

    Returns:
        the detached scaled loss that was backpropagated (0-dim).
    """
    if per_token_loss.ndim != 2 or response_mask.shape != per_token_loss.shape:
        raise ValueError(
            "per_token_loss and response_mask must both be (b, T), got "
            f"{tuple(per_token_loss.shape)} "
            f"and {tuple(response_mask.shape)}"
        )
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if loss_normalization == "sequence":
        if not step_sequence_count > 0:
            raise ValueError(f"step_sequence_count must be positive, got {step_sequence_count}")
        # this micro-batch's rows out of B_step
        share = per_token_loss.shape[0] / step_sequence_count
        loss = aggregate_loss_across_microbatch(per_token_loss, response_mask, "sequence") * share
    elif loss_normalization == "token":
        # an all-empty step has no tokens and no gradient; 1 keeps the division finite
        loss = aggregate_loss_across_microbatch(
            per_token_loss, response_mask, "token", max(float(step_token_count), 1.0)
        )
    else:
        loss = aggregate_loss_across_microbatch(
            per_token_loss, response_mask, loss_normalization, normalization_constant
        )
    loss = loss * world_size
    loss.backward()
    return loss.detach()
