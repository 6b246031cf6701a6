"""Stage 5 — off the policy: the KL penalty, truncated importance sampling and the full GRPO loss.

Stage 4's ratio r_t = π(o_t)/π_old(o_t) corrects for the policy having moved since the rollout; it
assumes π_old drew the tokens. Here the two corrections a real trainer adds, and the loss that holds
them (shapes: B sequences × T positions):
  estimate_kl                  δ = log π − log π_ref; k1 = δ, k2 = δ²/2, k3 = exp(−δ) − 1 + δ,
                               ratio_k1 = r·δ (Schulman 2020, "Approximating KL divergence",
                               http://joschu.net/blog/kl-approx.html; the fourth is open-instruct's)
  truncated_importance_weights w = min(π_old/π_sampler, C), no gradient: the sampler (vLLM, bf16) is
                               not the trainer (Yao et al. 2025, "Your efficient RL framework
                               secretly brings you off-policy RL training",
                               https://fengyao.notion.site/off-policy-rl)
  compute_grpo_loss            open-instruct's per-token loss (open_instruct/grpo_utils.py): DAPO's
                               decoupled bounds clip(r, 1−ε_low, 1+ε_high) (Yu et al. 2025, arXiv
                               2503.14476) or CISPO (arXiv 2506.13585), TIS weights on the max (as
                               open-instruct since PR #1650; before, inside it: the same value,
                               since the weights are ≥ 0), and the KL estimate.
The clipped surrogate and CISPO's weighted log π are stage 4's (`course.losses`), written once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course.losses import cispo_loss, clipped_surrogate
from course.variants import GRPO_LOSS_FNS, KL_ESTIMATORS  # this stage's names, torch-free there


def estimate_kl(
    new_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    estimator: str,
    ratio: torch.Tensor | None = None,
    response_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi, all (B, T).

    Schulman 2020, "Approximating KL Divergence". delta = log pi - log pi_ref;
    "k1" = delta;  "k2" = delta^2 / 2;  "k3" = exp(-delta) - 1 + delta;
    "ratio_k1" = ratio * delta (k1 importance-weighted for samples from pi_old;
    open-instruct's fourth estimator, open_instruct/grpo_utils.py).
    response_mask (B, T), optional: delta (and ratio) are 0 off the mask before any
    nonlinearity, so an inf or nan there reaches neither the value nor the gradient.
    """
    if not isinstance(estimator, str) or estimator not in KL_ESTIMATORS:
        raise ValueError(f"estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
    if ref_logprobs.shape != new_logprobs.shape:
        raise ValueError(
            f"ref_logprobs {tuple(ref_logprobs.shape)} must match new_logprobs "
            f"{tuple(new_logprobs.shape)}"
        )
    if new_logprobs.dtype in (torch.float16, torch.bfloat16):
        new_logprobs, ref_logprobs = new_logprobs.float(), ref_logprobs.float()
    delta = new_logprobs - ref_logprobs  # (B, T)
    if response_mask is not None:
        if response_mask.shape != delta.shape:
            raise ValueError(f"response_mask {tuple(response_mask.shape)} must match "
                             f"new_logprobs {tuple(delta.shape)}")
        delta = torch.where(response_mask.bool(), delta, 0)
        if ratio is not None and ratio.shape == delta.shape:
            ratio = torch.where(response_mask.bool(), ratio, 0)
    delta = delta.clamp(-40.0, 40.0)
    if estimator == "k1":
        return delta
    if estimator == "k2":
        return delta.pow(2) / 2
    if estimator == "k3":
        return torch.expm1(-delta) + delta  # exp(-delta) - 1, exact near 0
    if ratio is None or ratio.shape != new_logprobs.shape:
        raise ValueError(
            f"estimator 'ratio_k1' needs ratio of shape {tuple(new_logprobs.shape)}, "
            f"got {None if ratio is None else tuple(ratio.shape)}"
        )
    return ratio.to(delta.dtype) * delta


def truncated_importance_weights(
    old_log_probs: torch.Tensor,
    sampler_log_probs: torch.Tensor,
    cap: float,
    response_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """min(pi_old / pi_sampler, cap) per token (B, T), no gradient, 0 off the mask.

    Truncated importance sampling (Yao et al. 2025; open-instruct's
    --truncated_importance_sampling_ratio_cap, now its rho_* options).
    """
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0:
        raise ValueError(f"cap must be a positive number, got {cap!r}")
    if sampler_log_probs.shape != old_log_probs.shape:
        raise ValueError(
            f"sampler_log_probs {tuple(sampler_log_probs.shape)} must match "
            f"old_log_probs {tuple(old_log_probs.shape)}"
        )
    if response_mask is not None and response_mask.shape != old_log_probs.shape:
        raise ValueError(
            f"response_mask {tuple(response_mask.shape)} must match old_log_probs "
            f"{tuple(old_log_probs.shape)}"
        )
    with torch.no_grad():  # a fixed correction, not a parameter path
        log_weights = old_log_probs - sampler_log_probs
        if log_weights.dtype in (torch.float16, torch.bfloat16):
            log_weights = log_weights.float()
        if response_mask is not None:  # masked before exp: an inf or nan stays out
            log_weights = torch.where(response_mask.bool(), log_weights, -math.inf)
        # (B, T), 0 off the mask
        weights = torch.exp(torch.clamp(log_weights, max=math.log(cap)))
    return weights


@dataclass
class GRPOLossConfig:
    """The fields `compute_grpo_loss` reads (open-instruct's ExperimentConfig subset)."""

    loss_fn: str = "dapo"
    """"dapo" (PPO-clip with decoupled bounds) or "cispo" (capped, detached weight × log π)."""
    clip_lower: float = 0.2
    """ε_low: the ratio is clipped below at 1 − clip_lower (dapo only)."""
    clip_higher: float = 0.2
    """ε_high: clipped above at 1 + clip_higher (DAPO's clip-higher uses 0.28); CISPO's cap."""
    kl_estimator: str = "k3"
    """"k1" = δ, "k2" = δ²/2, "k3" = exp(−δ) − 1 + δ, "ratio_k1" = ratio·δ, with δ = log π − log
    π_ref."""
    beta: float = 0.0
    """Weight of the KL penalty in the total loss pg_loss_max + beta·kl."""

    def __post_init__(self) -> None:
        validate_grpo_config(self)


def validate_grpo_config(config, loss_fns: tuple[str, ...] = GRPO_LOSS_FNS) -> None:
    """Raise ValueError naming the field of `config` (a GRPOLossConfig, or any object
    with its fields) that is missing or out of range: the one check of a loss
    configuration's fields, at construction and in use. `loss_fns`: the losses it may
    name (a `course.frontier.loss.FrontierLoss` names more)."""
    try:  # each field by name, so that the error names the one that is missing
        _ = (config.loss_fn, config.clip_lower, config.clip_higher, config.kl_estimator,
             config.beta)
    except AttributeError as error:
        raise ValueError(f"config lacks a field of GRPOLossConfig: {error}") from None
    if config.loss_fn not in loss_fns:
        raise ValueError(f"config.loss_fn must be one of {loss_fns}, "
                         f"got {config.loss_fn!r}")
    if config.kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"config.kl_estimator must be one of {KL_ESTIMATORS}, "
                         f"got {config.kl_estimator!r}")
    if not (config.clip_lower >= 0 and config.clip_higher >= 0):
        raise ValueError("config.clip_lower and config.clip_higher must be >= 0, got "
                         f"{config.clip_lower}, {config.clip_higher}")


def compute_grpo_loss(
    new_logprobs: torch.Tensor,
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    config,
    tis_weights: torch.Tensor | None = None,
):
    """open-instruct's per-token GRPO loss (open_instruct/grpo_utils.py).

    Returns (pg_losses, pg_losses2, pg_loss_max, kl), each (B, T).
    dapo:  -A r,  -A clip(r, 1 - clip_lower, 1 + clip_higher),  their max
           (DAPO, arXiv 2503.14476)
    cispo: all three = -A sg(min(r, 1 + clip_higher)) log pi  (CISPO, arXiv 2506.13585)
    tis_weights (B, T) multiply pg_loss_max, never kl; kl = estimate_kl(...), or zeros
    without ref_logprobs. There is no mask: the caller selects new_logprobs and
    old_logprobs with its mask BEFORE computing ratio = exp(new − old), since backward
    through exp of an inf or nan at a masked position is nan whatever is selected later.
    """
    validate_grpo_config(config)
    if new_logprobs.ndim != 2 or ratio.shape != new_logprobs.shape:
        raise ValueError(
            "new_logprobs and ratio must be the same (B, T), got "
            f"{tuple(new_logprobs.shape)} and {tuple(ratio.shape)}"
        )
    if new_logprobs.dtype in (torch.float16, torch.bfloat16):
        new_logprobs, ratio = new_logprobs.float(), ratio.float()
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(-1)  # (B, 1) broadcasts over T
    advantages = advantages.to(new_logprobs.dtype)

    if config.loss_fn == "dapo":
        pg_losses, pg_losses2, pg_loss_max = clipped_surrogate(
            ratio, advantages, config.clip_lower, config.clip_higher
        )
    else:
        pg_losses = pg_losses2 = pg_loss_max = cispo_loss(
            ratio, advantages, new_logprobs, config.clip_higher
        )
    if tis_weights is not None:
        if tis_weights.shape != new_logprobs.shape:
            raise ValueError(
                f"tis_weights must be {tuple(new_logprobs.shape)}, got "
                f"{tuple(tis_weights.shape)}"
            )
        # weights, never a path for gradient
        pg_loss_max = pg_loss_max * tis_weights.detach()

    if ref_logprobs is None:
        kl = torch.zeros_like(new_logprobs)
    else:
        kl = estimate_kl(new_logprobs, ref_logprobs, config.kl_estimator, ratio)
    return pg_losses, pg_losses2, pg_loss_max, kl
