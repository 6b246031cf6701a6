"""Stage 6 — one GRPO optimizer step over one rollout batch.

rewards → group advantages → tokenize → micro-batches → per-token loss → normalized backward →
clip → step. The update is a function of the batch alone: not of `gradient_accumulation_steps`, not of
which rows share a micro-batch, not of how whole groups are split over data-parallel ranks. That
holds because every micro-batch is normalized by counts of the WHOLE step (B sequences, N response
tokens, summed over ranks) and scaled by the world size (DDP averages gradients); see `aggregation`.

Zero-advantage rows are skipped: every loss here is A × (something), so such a row contributes an
exactly zero gradient, and the step's counts B and N are taken before skipping, so the update is
unchanged. (A KL penalty or an entropy bonus would break this shortcut: those terms have gradient
even where A = 0.) Parameters left without a gradient get zeros, so that an optimizer with momentum
or weight decay steps exactly as it would on the unskipped batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from course.advantages import compute_group_normalized_rewards, compute_rollout_rewards
from course.aggregation import LOSS_NORMALIZATIONS, calculate_loss_and_backward
from course.losses import PG_METADATA_KEYS, PG_METHODS, compute_policy_gradient_loss
from course.metrics import LossStatistics
from course.scoring import get_response_log_probs
from course.tokenization import tokenize_prompt_and_output


def _world() -> tuple[int, bool]:
    distributed = dist.is_available() and dist.is_initialized()
    return (dist.get_world_size() if distributed else 1), distributed


def _all_reduce_sum(value: torch.Tensor, distributed: bool) -> torch.Tensor:
    if distributed:
        value = value.clone()
        dist.all_reduce(value)
    return value


def _validate(batch_size, prompts, ground_truths, group_size, gradient_accumulation_steps,
              loss_normalization, normalization_constant, method) -> None:
    if method not in PG_METHODS:
        raise ValueError(f"importance_reweighting_method must be one of {PG_METHODS}, got {method!r}")
    if batch_size == 0:
        raise ValueError("rollout_responses must not be empty")
    if len(prompts) != batch_size or len(ground_truths) != batch_size:
        raise ValueError(
            f"repeated_prompts ({len(prompts)}), rollout_responses ({batch_size}) and "
            f"repeated_ground_truths ({len(ground_truths)}) must have the same length"
        )
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0 or batch_size % group_size:
        raise ValueError(f"group_size must be a positive int dividing the batch size {batch_size}, got {group_size!r}")
    if (isinstance(gradient_accumulation_steps, bool) or not isinstance(gradient_accumulation_steps, int)
            or not 1 <= gradient_accumulation_steps <= batch_size):
        raise ValueError(
            f"gradient_accumulation_steps must be an int in [1, {batch_size}], got {gradient_accumulation_steps!r}"
        )
    if loss_normalization not in LOSS_NORMALIZATIONS:
        raise ValueError(f"loss_normalization must be one of {LOSS_NORMALIZATIONS}, got {loss_normalization!r}")
    if loss_normalization == "constant" and not (normalization_constant is not None and normalization_constant > 0):
        raise ValueError(f"normalization_constant must be positive for 'constant', got {normalization_constant!r}")
    if loss_normalization != "constant" and normalization_constant is not None:
        raise ValueError(
            f"normalization_constant is only used by loss_normalization='constant' ('token' counts the "
            f"step's tokens itself), got {normalization_constant!r} with {loss_normalization!r}"
        )


def grpo_train_step(
    model: torch.nn.Module,
    tokenizer,
    optimizer: torch.optim.Optimizer,
    gradient_accumulation_steps: int,
    max_grad_norm: float | None,
    reward_fn: Callable[[str, str], dict[str, float]],
    repeated_prompts: Sequence[str],
    rollout_responses: Sequence[str],
    repeated_ground_truths: Sequence[str],
    group_size: int,
    baseline: str = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: str = "std",
    importance_reweighting_method: str = "none",
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    loss_normalization: str = "sequence",
    normalization_constant: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor | float]]:
    """One optimizer step on B = n_groups · G rollouts (this rank's share under torch.distributed).

    Args:
        model: causal LM (optionally wrapped in DistributedDataParallel).
        tokenizer: the model's tokenizer.
        optimizer: over the model's parameters; stepped once, grads zeroed before and after.
        gradient_accumulation_steps: K; rows are split into K micro-batches of ⌈B/K⌉.
        max_grad_norm: clip the global gradient norm to this (None: no clipping).
        reward_fn, repeated_prompts, rollout_responses, repeated_ground_truths: B rollouts, grouped
            in consecutive blocks of `group_size`.
        baseline, advantage_eps, advantage_normalizer: see `compute_group_normalized_rewards`.
        importance_reweighting_method, cliprange: see `compute_policy_gradient_loss`.
        old_log_probs: (B, T') log π_old aligned with `tokenize_prompt_and_output` of this batch
            (T' ≥ its T; extra trailing columns are padding and ignored).
        loss_normalization: "sequence", "token" or "constant" (see `aggregation`).
        normalization_constant: C for "constant".

    Returns:
        (loss, metadata): loss is the step's total loss (0-dim, detached); metadata: the summed loss statistics of the step.
    """
    batch_size = len(rollout_responses)
    _validate(batch_size, repeated_prompts, repeated_ground_truths, group_size,
              gradient_accumulation_steps, loss_normalization, normalization_constant,
              importance_reweighting_method)
    world_size, distributed = _world()
    is_ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    device = next(model.parameters()).device

    rewards, reward_metadata = compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)
    advantages, advantage_metadata = compute_group_normalized_rewards(
        rewards, group_size, baseline, advantage_eps, advantage_normalizer
    )
    batch = tokenize_prompt_and_output(repeated_prompts, rollout_responses, tokenizer)
    input_ids, labels, response_mask = batch["input_ids"], batch["labels"], batch["response_mask"]  # (B, T)
    positions = input_ids.shape[1]
    if old_log_probs is not None:
        if old_log_probs.ndim != 2 or old_log_probs.shape[0] != batch_size or old_log_probs.shape[1] < positions:
            raise ValueError(
                f"old_log_probs must be (B, T) = ({batch_size}, {positions}) aligned with the tokenized "
                f"batch, got {tuple(old_log_probs.shape)}"
            )
        old_log_probs = old_log_probs[:, :positions]

    # Counts of the whole step, before any row is skipped, over every rank.
    step_sequence_count = _all_reduce_sum(torch.tensor(float(batch_size), dtype=torch.float64), distributed)
    step_token_count = _all_reduce_sum(response_mask.sum().to(torch.float64), distributed)

    optimizer.zero_grad(set_to_none=True)
    active_rows = torch.nonzero(advantages != 0).flatten()  # (B_active,)
    microbatch_size = -(-batch_size // gradient_accumulation_steps)
    microbatches = [rows for rows in active_rows.split(microbatch_size) if rows.numel()]
    statistics = LossStatistics()
    # declare every metric up front: a rank that skips all its rows must still all-reduce the same keys
    statistics.add_mean("token_entropy", 0.0, 0.0)
    if "clip_fraction" in PG_METADATA_KEYS[importance_reweighting_method]:
        statistics.ratio("clip_fraction", "clip_count", "clip_total")
    for key in PG_METADATA_KEYS[importance_reweighting_method]:
        if key in ("clip_count", "clip_total", "importance_ratio_count"):
            statistics.add_count(key, 0.0)
        elif key != "clip_fraction":
            statistics.add_mean(key, 0.0, 0.0)
    total_loss = torch.zeros((), dtype=torch.float64)
    non_finite = torch.zeros((), dtype=torch.float64)
    # Under DDP every forward may broadcast buffers and the last backward all-reduces gradients, so
    # every rank makes the same number of passes; a rank short of rows adds zero-weight passes.
    passes = len(microbatches)
    if is_ddp:
        passes_tensor = torch.tensor(passes, dtype=torch.int64)
        dist.all_reduce(passes_tensor, op=dist.ReduceOp.MAX)
        passes = int(passes_tensor)
    for index in range(passes):
        # DDP all-reduces on the last backward only; the others accumulate locally
        sync = is_ddp and index < passes - 1
        with model.no_sync() if sync else contextlib.nullcontext():
            if index >= len(microbatches):
                probe = get_response_log_probs(model, input_ids[:1].to(device), labels[:1].to(device))
                (probe["log_probs"].sum() * 0.0).backward()
                continue
            rows = microbatches[index]
            mask = response_mask[rows]  # (b, T)
            # trailing columns past every row's last response token cannot change any graded position
            width = int(mask.any(dim=0).nonzero().max()) + 1 if mask.any() else 1
            mask = mask[:, :width].to(device)
            scored = get_response_log_probs(
                model, input_ids[rows, :width].to(device), labels[rows, :width].to(device),
                return_token_entropy=True,
            )
            per_token_loss, loss_metadata = compute_policy_gradient_loss(
                advantages[rows].to(device),
                scored["log_probs"],
                importance_reweighting_method,
                old_log_probs[rows, :width].to(device) if old_log_probs is not None else None,
                cliprange,
                mask,
            )
            loss = calculate_loss_and_backward(
                per_token_loss, mask, loss_normalization, step_sequence_count, step_token_count,
                normalization_constant, world_size,
            )
        non_finite += float(not torch.isfinite(loss))
        total_loss += loss.double().cpu() / world_size
        _record(statistics, loss_metadata, scored["token_entropy"], mask)

    # Parameters no row reached get zeros, so the optimizer steps as on the unskipped batch.
    for parameter in model.parameters():
        if parameter.requires_grad and parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if max_grad_norm is not None:
        gradient_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    else:
        gradient_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    non_finite = _all_reduce_sum(non_finite, distributed)
    if non_finite > 0 or not torch.isfinite(gradient_norm):
        optimizer.zero_grad(set_to_none=True)
        raise RuntimeError(
            f"non-finite {'loss' if non_finite > 0 else 'gradient norm'} in grpo_train_step; the optimizer "
            "step was aborted and the gradients zeroed"
        )
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

    total_loss = _all_reduce_sum(total_loss, distributed)
    metadata: dict[str, torch.Tensor | float] = {
        **reward_metadata,
        **advantage_metadata,
        **{k: torch.tensor(v) for k, v in statistics.compute(all_reduce=distributed).items()},
        "loss": total_loss.float(),
        "gradient_norm": gradient_norm.detach().float().cpu(),
        "response_token_count": step_token_count.float(),
        "optimizer_step": 1.0,
    }
    return total_loss.float(), metadata


def _record(statistics: LossStatistics, loss_metadata: dict, token_entropy: torch.Tensor, mask: torch.Tensor) -> None:
    """Fold one micro-batch's metadata into the step's weighted means and counts."""
    token_count = mask.sum()
    statistics.add_masked("token_entropy", token_entropy, mask)
    for key, value in loss_metadata.items():
        if key in ("clip_count", "clip_total", "importance_ratio_count"):
            statistics.add_count(key, value)
        elif key == "importance_ratio_mean":
            statistics.add_mean(key, value, loss_metadata["importance_ratio_count"])
        elif key.endswith("_mean"):
            statistics.add_mean(key, value, token_count)
