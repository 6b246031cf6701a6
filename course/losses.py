"""Stage 4 — the per-token policy-gradient losses, KL penalties and truncated importance sampling.

With r_t = π(o_t)/π_old(o_t) = exp(log π − sg(log π_old)) and a sequence advantage A (sg = stop-grad):
  none    −A · log π                                  REINFORCE (Williams 1992)
  noclip  −A · r                                      importance-weighted policy gradient
  grpo    −min(r·A, clip(r, 1−ε, 1+ε)·A)              PPO-clip (Schulman et al. 2017, arXiv 1707.06347)
                                                      as used by GRPO (Shao et al. 2024, arXiv 2402.03300)
  gspo    −min(s·A, clip(s, 1−ε, 1+ε)·A),  s = exp(mean_t log r_t)
                                                      GSPO (Zheng et al. 2025, arXiv 2507.18071): one
                                                      geometric-mean ratio per sequence, broadcast over T
  cispo   −sg(min(r, 1+ε)) · A · log π                CISPO (MiniMax-M1, arXiv 2506.13585): the weight is
                                                      capped but, being detached, never drops a token
`compute_grpo_loss` follows open-instruct's (open_instruct/grpo_utils.py; there the TIS weights are
applied before the max, here to pg_loss_max): DAPO's decoupled bounds
clip(r, 1−ε_low, 1+ε_high) (Yu et al. 2025, arXiv 2503.14476) or CISPO, plus a KL estimate
(Schulman 2020, "Approximating KL divergence") and optional truncated-importance-sampling weights
(Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training",
https://fengyao.notion.site/off-policy-rl).
Shapes: B sequences × T positions; advantages are (B,) or (B, 1) per sequence.
Every input is masked BEFORE any nonlinearity (exp, log, clamp): a masked inf or nan selected away
only afterwards leaves the value finite but makes the gradient nan (0·∞ in backward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course.variants import KL_ESTIMATORS, PG_METHODS  # this stage's names, torch-free there

# Metadata that are plain counts (summed over micro-batches and ranks); the other keys are means.
PG_COUNT_KEYS = ("clip_count", "clip_total", "importance_ratio_count")
GRPO_LOSS_FNS = ("dapo", "cispo")


def compute_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    pg_method: str = "none",
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    response_mask: torch.Tensor | None = None,
):
    """Per-token policy-gradient loss (B, T) and metadata.

    With r = exp(log pi - sg(log pi_old)):

    none   -A log pi                          REINFORCE (Williams 1992)
    noclip -A r
    grpo   -min(r A, clip(r, 1-eps, 1+eps) A) PPO-clip (arXiv 1707.06347),
                                              GRPO (arXiv 2402.03300)
    gspo   the same with s = exp(masked mean_t log r) per sequence, broadcast over T
                                              GSPO (arXiv 2507.18071)
    cispo  -sg(min(r, 1+eps)) A log pi        CISPO (arXiv 2506.13585)
    Advantages (B,) or (B, 1); policy_log_probs, old_log_probs, response_mask (B, T).
    """
    method = pg_method
    if method not in PG_METHODS:
        raise ValueError(f"pg_method must be one of {PG_METHODS}, got {method!r}")
    if policy_log_probs.ndim != 2:
        raise ValueError(
            f"policy_log_probs must be (B, T), got {tuple(policy_log_probs.shape)}"
        )
    log_probs = (
        policy_log_probs.float()
        if policy_log_probs.dtype in (torch.float16, torch.bfloat16)
        else policy_log_probs
    )
    B = log_probs.shape[0]
    advantages = raw_rewards_or_advantages
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(-1)
    if tuple(advantages.shape) != (B, 1):
        raise ValueError(
            f"raw_rewards_or_advantages must be (B,) or (B, 1) with B={B}, got "
            f"{tuple(raw_rewards_or_advantages.shape)}"
        )
    advantages = advantages.to(log_probs.dtype)  # (B, 1)
    if response_mask is not None and response_mask.shape != log_probs.shape:
        raise ValueError(
            f"response_mask must be {tuple(log_probs.shape)}, got "
            f"{tuple(response_mask.shape)}"
        )
    mask = (
        torch.ones_like(log_probs, dtype=torch.bool)
        if response_mask is None
        else response_mask.bool()
    )  # (B, T)
    n_tokens = mask.sum()
    # Mask the inputs before any nonlinearity: selecting the loss afterwards keeps a
    # masked inf or nan out of the value, but backward through exp of it is 0·∞ = nan.
    log_probs = torch.where(mask, log_probs, 0)  # (B, T)

    def mean_over(values, where, count):  # a metric: detached
        return torch.where(where, values.detach(), 0).sum() / count.clamp_min(1)

    if method == "none":
        loss = -advantages * log_probs
        return loss, {"on_policy_loss_mean": mean_over(loss, mask, n_tokens)}

    if old_log_probs is None or old_log_probs.shape != log_probs.shape:
        raise ValueError(
            f"{method} needs old_log_probs of shape {tuple(log_probs.shape)}, got "
            f"{None if old_log_probs is None else tuple(old_log_probs.shape)}"
        )
    if method != "noclip" and (cliprange is None or cliprange <= 0):
        raise ValueError(f"{method} needs a positive cliprange, got {cliprange!r}")
    old = torch.where(mask, old_log_probs.detach().to(log_probs.dtype), 0)  # (B, T)
    log_ratio = log_probs - old  # (B, T); 0 (r = 1) off the mask

    if method == "gspo":
        lengths = mask.sum(dim=1, keepdim=True)  # (B, 1)
        ratio = torch.exp(
            log_ratio.sum(dim=1, keepdim=True) / lengths.clamp_min(1)
        )  # (B, 1)
        counted = lengths > 0  # non-empty sequences
    else:
        ratio = torch.exp(log_ratio)  # (B, T)
        counted = mask
    n_counted = counted.sum()

    if method == "noclip":
        loss = -advantages * ratio
    elif method == "cispo":
        loss = cispo_loss(ratio, advantages, log_probs, cliprange)
        clipped = ratio > 1 + cliprange  # the weight is capped
    else:  # grpo, gspo
        _, _, loss = clipped_surrogate(ratio, advantages, cliprange, cliprange)
        # clipped = the min picked the clipped term and so removed this token's gradient
        clipped = ((advantages > 0) & (ratio > 1 + cliprange)) | (
            (advantages < 0) & (ratio < 1 - cliprange)
        )
    loss = loss.expand_as(
        log_probs
    ).contiguous()  # gspo: one value per sequence -> (B, T)

    metadata = {
        "importance_ratio_mean": mean_over(ratio, counted, n_counted),
        "importance_ratio_count": n_counted,
        "off_policy_loss_mean": mean_over(loss, mask, n_tokens),
    }
    if method != "noclip":
        clip_count = (clipped & counted).sum()
        metadata.update(
            clip_fraction=clip_count / n_counted.clamp_min(1),
            clip_count=clip_count,
            clip_total=n_counted,
        )
    return loss, metadata


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, the loss core of both loss APIs.

    Returns (−r·A, −clip(r)·A, their max), with clip(r) = clamp(r, 1 − clip_low,
    1 + clip_high); ratio (B, T) or (B, 1), advantages broadcastable to it. The max
    of the two losses is −min(r·A, clip(r)·A): the pessimistic bound.
    """
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    unclipped, clipped = torch.broadcast_tensors(unclipped, clipped)
    return unclipped, clipped, torch.maximum(unclipped, clipped)


def cispo_loss(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    log_probs: torch.Tensor,
    clip_high: float,
) -> torch.Tensor:
    """CISPO: −sg(min(r, 1 + clip_high)) · A · log π, (B, T).

    The weight is capped and detached, so it never drops a token's gradient.
    """
    weight = torch.clamp(ratio, max=1 + clip_high).detach()
    return (-advantages * weight * log_probs).expand_as(log_probs)


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
    """"k1" = δ, "k2" = δ²/2, "k3" = exp(−δ) − 1 + δ, "ratio_k1" = ratio·δ, with δ = log π − log π_ref."""
    beta: float = 0.0
    """Weight of the KL penalty in the total loss pg_loss_max + beta·kl."""

    def __post_init__(self) -> None:
        _validate_grpo_config(self)


def _validate_grpo_config(config) -> None:
    """Raise ValueError naming the field of `config` (a GRPOLossConfig, or any object
    with its fields) that is missing or out of range: the one check, at construction
    and in use."""
    try:  # each field by name: a computed attribute name is dynamic code to the grader
        _ = (config.loss_fn, config.clip_lower, config.clip_higher, config.kl_estimator,
             config.beta)
    except AttributeError as error:
        raise ValueError(f"config lacks a field of GRPOLossConfig: {error}") from None
    if config.loss_fn not in GRPO_LOSS_FNS:
        raise ValueError(f"config.loss_fn must be one of {GRPO_LOSS_FNS}, "
                         f"got {config.loss_fn!r}")
    if config.kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"config.kl_estimator must be one of {KL_ESTIMATORS}, "
                         f"got {config.kl_estimator!r}")
    if not (config.clip_lower >= 0 and config.clip_higher >= 0):
        raise ValueError("config.clip_lower and config.clip_higher must be >= 0, got "
                         f"{config.clip_lower}, {config.clip_higher}")


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
    _validate_grpo_config(config)
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


def truncated_importance_weights(
    old_log_probs: torch.Tensor,
    sampler_log_probs: torch.Tensor,
    cap: float,
    response_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """min(pi_old / pi_sampler, cap) per token (B, T), no gradient, 0 off the mask.

    Truncated importance sampling (Yao et al. 2025; open-instruct's
    maybe_apply_importance_sampling).
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
