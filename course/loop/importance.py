"""Importance-sampling corrections for a sampler that is not the trained policy: the modes of 2026
trainers.

A rollout sampled by π_s (vLLM, a bf16 copy, a stale policy) is trained as if π_old had drawn it;
per token the importance ratio is ρ_t = π_old(y_t)/π_s(y_t), log ρ_t = old_t − sampler_t. The
trainers differ in the LEVEL at which ρ is taken and in what happens ABOVE the cap C:

  level    token      ρ_t                                   (TRL `token_*`, verl `token`,
                                                            open-instruct)
           sequence   ρ_i = Π_t ρ_t = exp(Σ_t log ρ_t)      (TRL `sequence_*`, verl `sequence`)
           geometric  ρ_i = exp(Σ_t log ρ_t / |y_i|)        (verl `geometric`: length-independent)
  mode     truncate   w = min(ρ, C)                         (TIS, Yao et al. 2025)
           mask       w = ρ if ρ ≤ C else 0                 (TRL `*_mask`, verl `mask`: rejection)

(B, T) weights, no gradient, 0 off the response mask; a sequence-level weight is the same for every
token of its row. The caps differ too: TRL's `vllm_importance_sampling_clip_max` (formerly
`vllm_importance_sampling_cap`) defaults to 3 (2 before its modes), verl's `rollout_is_threshold` to
2, open-instruct's `truncated_importance_sampling_ratio_cap` to 2 (replaced by its `rho_*` options
in PR #1650). Sources: trl/trainer/grpo_trainer.py (`vllm_importance_sampling_mode`), verl
docs/algo/rollout_corr.md (`rollout_is`, `rollout_is_level`, `rollout_is_mode`),
open_instruct/grpo_fast.py.

The graded train step applies min(exp(old − sampler), cap) itself (`truncated_importance_weights`).
`as_sampler_log_probs` turns any weights w ≤ C into the sampler log-probs that make that step apply
exactly w: sampler' = old − log w (and old + 10⁴ where w = 0, whose exp is 0 in every float type),
so every mode runs through the learner's own train step, unchanged, under accumulation and DDP.
"""

from __future__ import annotations

import math

import torch

from course.variants import IS_LEVELS, IS_MODES

# exp(-1e4) is exactly 0 in float16, bfloat16, float32 and float64
_ZERO_WEIGHT_LOG = 1e4


def importance_weights(old_log_probs: torch.Tensor, sampler_log_probs: torch.Tensor,
                       response_mask: torch.Tensor, level: str = "token", mode: str = "truncate",
                       cap: float = 2.0) -> torch.Tensor:
    """w (B, T): the importance weight of each response token for `level` and `mode`, 0 off the
    mask."""
    if level not in IS_LEVELS:
        raise ValueError(f"level must be one of {IS_LEVELS}, got {level!r}")
    if mode not in IS_MODES:
        raise ValueError(f"mode must be one of {IS_MODES}, got {mode!r}")
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not (cap > 0
                                                                          and math.isfinite(cap)):
        raise ValueError(f"cap must be a positive finite number, got {cap!r}")
    if not old_log_probs.shape == sampler_log_probs.shape == response_mask.shape:
        raise ValueError(f"old_log_probs {tuple(old_log_probs.shape)}, sampler_log_probs "
                         f"{tuple(sampler_log_probs.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} must have one shape (B, T)")
    mask = response_mask.bool()
    with torch.no_grad():
        # (B, T)
        log_ratio = torch.where(mask, old_log_probs.double() - sampler_log_probs.double(), 0)
        if level != "token":
            total = log_ratio.sum(dim=1, keepdim=True)  # (B, 1) log Π ρ_t
            if level == "geometric":
                total = total / mask.sum(dim=1, keepdim=True).clamp(min=1)
            log_ratio = total.expand_as(log_ratio)
        log_cap = math.log(cap)
        weights = torch.exp(log_ratio.clamp(max=log_cap))  # (B, T) min(ρ, C)
        if mode == "mask":
            weights = torch.where(log_ratio > log_cap, 0, weights)
        weights = torch.where(mask, weights, 0)
    return weights.to(old_log_probs.dtype)


def as_sampler_log_probs(old_log_probs: torch.Tensor, weights: torch.Tensor,
                         response_mask: torch.Tensor) -> torch.Tensor:
    """sampler' (B, T) with exp(old − sampler') = w on the mask (w ≥ 0): what makes the train
    step's min(exp(old − sampler'), cap) apply the weights w ≤ cap exactly. Off the mask: old."""
    if (weights < 0).any():
        raise ValueError("weights must be >= 0")
    mask = response_mask.bool() & (weights > 0)
    shifted = torch.where(mask, -torch.log(torch.where(mask, weights, 1)), _ZERO_WEIGHT_LOG)
    return torch.where(response_mask.bool(), old_log_probs + shifted.to(old_log_probs.dtype),
                       old_log_probs)
