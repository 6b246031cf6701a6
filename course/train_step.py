"""Stage 6 — one GRPO optimizer step over one rollout batch.

rewards → group advantages → tokenize → K micro-batches → per-token loss → normalized backward →
clip → step. The per-token loss is the policy-gradient loss of `losses` (times truncated importance
weights when the sampler's log-probs are given) plus β·KL(π ‖ π_ref) when `kl_beta` > 0:
  ℓ_t = w_t · pg_t + β · kl_t,   w_t = min(π_old/π_sampler, cap),   kl_t = `estimate_kl` of log π − log π_ref
as open-instruct's GRPO loss does (open_instruct/grpo_utils.py; TIS: Yao et al. 2025).

The update is a function of the batch alone: not of `gradient_accumulation_steps`, not of which rows
share a micro-batch, not of how whole groups are split over data-parallel ranks. That holds because
every term is per token and every micro-batch is normalized by counts of the WHOLE step (B sequences,
N response tokens, summed over ranks) and scaled by the world size (DDP averages gradients); see
`aggregation`. Every row is scored, also those whose advantage is 0: their policy-gradient term has
no gradient, but their KL term does, and every rank makes exactly K passes, as DDP requires.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from course.advantages import compute_group_normalized_rewards, compute_rollout_rewards
from course.aggregation import LOSS_NORMALIZATIONS, calculate_loss_and_backward
from course.distributed import is_distributed, rank_and_world_size
from course.losses import (
    KL_ESTIMATORS,
    PG_COUNT_KEYS,
    PG_METHODS,
    compute_policy_gradient_loss,
    estimate_kl,
    truncated_importance_weights,
)
from course.metrics import LossStatistics
from course.scoring import get_response_log_probs
from course.tokenization import tokenize_prompt_and_output

# The optional (B, T') log-prob inputs, aligned with the tokenized batch.
ALIGNED_LOG_PROBS = ("old_log_probs", "ref_log_probs", "sampler_log_probs")


@dataclass(frozen=True)
class LossTerms:
    """What the per-token loss of a micro-batch is made of (see the module docstring)."""

    method: str = "none"
    cliprange: float | None = None
    kl_beta: float = 0.0
    kl_estimator: int = 2
    ref_model: torch.nn.Module | None = None
    tis_cap: float = 2.0


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
    kl_beta: float = 0.0,
    kl_estimator: int = 2,
    ref_log_probs: torch.Tensor | None = None,
    ref_model: torch.nn.Module | None = None,
    sampler_log_probs: torch.Tensor | None = None,
    tis_cap: float = 2.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor | float]]:
    """One optimizer step on B = n_groups · G rollouts (this rank's share under torch.distributed).

    Args:
        model: causal LM (optionally wrapped in DistributedDataParallel); optimizer: over its
            parameters, stepped once, gradients zeroed before and after.
        gradient_accumulation_steps: K; the B rows are split into K micro-batches (1 ≤ K ≤ B).
        max_grad_norm: clip the global gradient norm to this (None: no clipping).
        reward_fn, repeated_prompts, rollout_responses, repeated_ground_truths: B rollouts, grouped
            in consecutive blocks of `group_size`; baseline, advantage_eps, advantage_normalizer:
            see `compute_group_normalized_rewards`.
        importance_reweighting_method, cliprange: see `compute_policy_gradient_loss`.
        old_log_probs, ref_log_probs, sampler_log_probs: (B, T') log π_old, log π_ref and the
            sampler's log-probs of the tokenized batch (T' ≥ its T; extra columns are ignored).
        loss_normalization, normalization_constant: "sequence", "token" or "constant" and its C.
        kl_beta, kl_estimator: weight β ≥ 0 of the KL penalty and the estimator (`estimate_kl`);
            β > 0 needs `ref_log_probs` or a `ref_model` to score the batch.
        tis_cap: cap of the truncated importance weights, applied when `sampler_log_probs` is given.

    Returns:
        (loss, metadata): the step's total loss (0-dim, detached); reward, advantage and loss metadata
        (means over the step), `loss`, `gradient_norm` (before clipping), `response_token_count`, `optimizer_step`.
    """
    aligned = {"old_log_probs": old_log_probs, "ref_log_probs": ref_log_probs,
               "sampler_log_probs": sampler_log_probs}
    terms = LossTerms(importance_reweighting_method, cliprange, kl_beta, kl_estimator, ref_model, tis_cap)
    _validate(len(rollout_responses), repeated_prompts, repeated_ground_truths, group_size,
              gradient_accumulation_steps, loss_normalization, normalization_constant, terms, aligned)
    _, world_size = rank_and_world_size()
    rewards, reward_metadata = compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)
    advantages, advantage_metadata = compute_group_normalized_rewards(
        rewards, group_size, baseline, advantage_eps, advantage_normalizer)
    batch = _aligned_batch(tokenize_prompt_and_output(repeated_prompts, rollout_responses, tokenizer),
                           advantages, aligned)
    # Counts of the whole step, over every rank: every micro-batch is normalized by them.
    sequence_count = _sum_over_ranks(torch.tensor(float(len(advantages)), dtype=torch.float64))
    token_count = _sum_over_ranks(batch["response_mask"].sum().to(torch.float64))
    statistics, total_loss, non_finite = LossStatistics(), torch.zeros((), dtype=torch.float64), 0.0
    optimizer.zero_grad(set_to_none=True)
    microbatches = torch.arange(len(advantages)).tensor_split(gradient_accumulation_steps)  # K, non-empty
    for index, rows in enumerate(microbatches):
        with _accumulating(model, last=index == len(microbatches) - 1):
            micro = _microbatch(batch, rows, next(model.parameters()).device)
            per_token_loss, loss_metadata = per_token_step_loss(model, micro, terms)
            loss = calculate_loss_and_backward(per_token_loss, micro["response_mask"], loss_normalization,
                                               sequence_count, token_count, normalization_constant, world_size)
        non_finite += float(not torch.isfinite(loss))
        total_loss += loss.double().cpu() / world_size
        _record(statistics, loss_metadata, micro["response_mask"])
    gradient_norm = _clip_and_step(model, optimizer, max_grad_norm, _sum_over_ranks(torch.tensor(non_finite)))
    total_loss = _sum_over_ranks(total_loss).float()
    metrics = {k: torch.tensor(v) for k, v in statistics.compute(all_reduce=is_distributed()).items()}
    return total_loss, {**reward_metadata, **advantage_metadata, **metrics, "loss": total_loss,
                        "gradient_norm": gradient_norm, "response_token_count": token_count.float(),
                        "optimizer_step": 1.0}


def per_token_step_loss(
    model: torch.nn.Module, micro: dict[str, torch.Tensor], terms: LossTerms
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """ℓ = w · pg + β · kl for one micro-batch (b, T), and its metadata ((b, T) tensors are token values).

    π_old is `old_log_probs` when given, else the policy itself (an on-policy step): the TIS weights
    compare it with the sampler, and estimator 3 weights k1 by r = π/π_old.
    """
    scored = get_response_log_probs(model, micro["input_ids"], micro["labels"], return_token_entropy=True)
    log_probs, mask = scored["log_probs"], micro["response_mask"]  # (b, T)
    old = micro.get("old_log_probs")
    loss, metadata = compute_policy_gradient_loss(micro["advantages"], log_probs, terms.method, old,
                                                  terms.cliprange, mask)
    metadata["token_entropy"] = scored["token_entropy"]
    old = log_probs.detach() if old is None else old
    if "sampler_log_probs" in micro:
        weights = truncated_importance_weights(old, micro["sampler_log_probs"], terms.tis_cap, mask)
        loss = loss * weights
        metadata["tis_weight_mean"] = weights
    if terms.kl_beta > 0:
        ref = micro.get("ref_log_probs")
        if ref is None:
            with torch.no_grad():
                ref = get_response_log_probs(terms.ref_model, micro["input_ids"], micro["labels"])["log_probs"]
        kl = estimate_kl(log_probs, ref, terms.kl_estimator, ratio=torch.exp(log_probs - old.detach()))
        loss = loss + terms.kl_beta * kl
        metadata["kl_mean"] = kl
    return loss, metadata


def _validate(batch_size, prompts, ground_truths, group_size, gradient_accumulation_steps,
              loss_normalization, normalization_constant, terms: LossTerms, aligned: dict) -> None:
    if terms.method not in PG_METHODS:
        raise ValueError(f"importance_reweighting_method must be one of {PG_METHODS}, got {terms.method!r}")
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
    _validate_penalties(terms, aligned)


def _validate_penalties(terms: LossTerms, aligned: dict) -> None:
    if not (isinstance(terms.kl_beta, (int, float)) and terms.kl_beta >= 0):
        raise ValueError(f"kl_beta must be a number >= 0, got {terms.kl_beta!r}")
    if terms.kl_estimator not in KL_ESTIMATORS or isinstance(terms.kl_estimator, bool):
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {terms.kl_estimator!r}")
    has_reference = (aligned["ref_log_probs"] is not None) + (terms.ref_model is not None)
    if terms.kl_beta > 0 and has_reference != 1:
        raise ValueError(f"kl_beta > 0 needs exactly one of ref_log_probs and ref_model, got {has_reference}")
    if aligned["sampler_log_probs"] is not None and not (
            isinstance(terms.tis_cap, (int, float)) and not isinstance(terms.tis_cap, bool) and terms.tis_cap > 0):
        raise ValueError(f"tis_cap must be a positive number, got {terms.tis_cap!r}")


def _aligned_batch(batch: dict[str, torch.Tensor], advantages: torch.Tensor, aligned: dict) -> dict:
    """The tokenized batch (B, T) with its advantages (B,) and the given log-probs cut to (B, T)."""
    batch = {**batch, "advantages": advantages}
    batch_size, positions = batch["input_ids"].shape
    for name, log_probs in aligned.items():
        if log_probs is None:
            continue
        if log_probs.ndim != 2 or log_probs.shape[0] != batch_size or log_probs.shape[1] < positions:
            raise ValueError(
                f"{name} must be (B, T) = ({batch_size}, {positions}) aligned with the tokenized "
                f"batch, got {tuple(log_probs.shape)}"
            )
        batch[name] = log_probs[:, :positions]
    return batch


def _microbatch(batch: dict[str, torch.Tensor], rows: torch.Tensor, device: torch.device) -> dict:
    """Rows of the batch on `device`, without the trailing columns past every row's last response token."""
    mask = batch["response_mask"][rows]  # (b, T)
    width = int(mask.any(dim=0).nonzero().max()) + 1 if mask.any() else 1
    return {name: value[rows, :width].to(device) if value.ndim == 2 else value[rows].to(device)
            for name, value in batch.items()}


def _accumulating(model: torch.nn.Module, last: bool):
    """DDP all-reduces gradients on the last backward of the step; the others accumulate locally."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel) and not last:
        return model.no_sync()
    return contextlib.nullcontext()


def _sum_over_ranks(value: torch.Tensor) -> torch.Tensor:
    if is_distributed():
        value = value.clone()
        dist.all_reduce(value)
    return value


def _clip_and_step(model, optimizer, max_grad_norm: float | None, non_finite: torch.Tensor) -> torch.Tensor:
    """Clip (an infinite bound scales by exactly 1), step unless anything is non-finite; the norm before clipping."""
    bound = float("inf") if max_grad_norm is None else max_grad_norm
    gradient_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), bound).detach().float().cpu()
    if non_finite > 0 or not torch.isfinite(gradient_norm):
        optimizer.zero_grad(set_to_none=True)
        raise RuntimeError(
            f"non-finite {'loss' if non_finite > 0 else 'gradient norm'} in grpo_train_step; the optimizer "
            "step was aborted and the gradients zeroed"
        )
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return gradient_norm


def _record(statistics: LossStatistics, loss_metadata: dict, mask: torch.Tensor) -> None:
    """Fold one micro-batch's metadata into the step's weighted means and counts."""
    for key, value in loss_metadata.items():
        if value.ndim == 2:  # per-token values: their mean over response tokens
            statistics.add_masked(key, value, mask)
        elif key in PG_COUNT_KEYS:
            statistics.add_count(key, value)
        elif key == "clip_fraction":
            statistics.ratio(key, "clip_count", "clip_total")
        elif key == "importance_ratio_mean":
            statistics.add_mean(key, value, loss_metadata["importance_ratio_count"])
        else:
            statistics.add_mean(key, value, mask.sum())
