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
`compute_grpo_loss` is open-instruct's form (open_instruct/grpo_utils.py): DAPO's decoupled bounds
clip(r, 1−ε_low, 1+ε_high) (Yu et al. 2025, arXiv 2503.14476) or CISPO, plus a KL estimate
(Schulman 2020, "Approximating KL divergence") and optional truncated-importance-sampling weights
(Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training").
Shapes: B sequences × T positions; advantages are (B,) or (B, 1) per sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course.scoring import upcast_half

PG_METHODS = ("none", "noclip", "grpo", "gspo", "cispo")
_OFF_POLICY_KEYS = ("importance_ratio_mean", "importance_ratio_count", "off_policy_loss_mean")
_CLIP_KEYS = ("clip_fraction", "clip_count", "clip_total")
# Metadata that are plain counts (summed over micro-batches and ranks); the other keys are means.
PG_COUNT_KEYS = ("clip_count", "clip_total", "importance_ratio_count")
# The metadata keys each method returns: 0-dim tensors, means over response tokens (GSPO's ratio and
# clip statistics: over sequences) and the counts behind them.
PG_METADATA_KEYS = {
    "none": ("on_policy_loss_mean",),
    "noclip": _OFF_POLICY_KEYS,
    "grpo": _OFF_POLICY_KEYS + _CLIP_KEYS,
    "gspo": _OFF_POLICY_KEYS + _CLIP_KEYS,
    "cispo": _OFF_POLICY_KEYS + _CLIP_KEYS,
}
GRPO_LOSS_FNS = ("dapo", "cispo")
# open-instruct clamps δ before exp so that k3's exp(−δ) cannot overflow; |δ| > 40 is a broken policy.
KL_LOG_RATIO_CLAMP = 40.0


def _check_same_shape(name: str, tensor: torch.Tensor | None, like: torch.Tensor, like_name: str) -> None:
    if tensor is not None and tuple(tensor.shape) != tuple(like.shape):
        raise ValueError(
            f"{name} must have the shape of {like_name} {tuple(like.shape)}, got {tuple(tensor.shape)}"
        )


def _sequence_advantages(advantages: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(B,) or (B, 1) → (B, 1), so that it broadcasts over T."""
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(-1)
    if advantages.ndim != 2 or advantages.shape != (batch_size, 1):
        raise ValueError(
            f"raw_rewards_or_advantages must be (B,) or (B, 1) with B={batch_size}, got "
            f"{tuple(advantages.shape)}"
        )
    return upcast_half(advantages)


def _masked_token_mean(values: torch.Tensor, mask: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    return (values.detach() * mask).sum() / count.clamp_min(1)


def compute_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    importance_reweighting_method: str = "none",
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    response_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token policy-gradient loss (B, T) for one of `PG_METHODS`, and its metadata.

    Args:
        raw_rewards_or_advantages: (B,) or (B, 1) per-sequence weights A.
        policy_log_probs: (B, T) log π of the sampled tokens under the policy being trained.
        importance_reweighting_method: "none", "noclip", "grpo", "gspo" or "cispo".
        old_log_probs: (B, T) log π_old of the same tokens (needed by every method but "none").
        cliprange: ε > 0 (needed by "grpo", "gspo", "cispo").
        response_mask: (B, T) 0/1; restricts the metadata means (and GSPO's ratio) to response tokens.

    Returns:
        per-token loss (B, T) and metadata of 0-dim tensors (keys: `PG_METADATA_KEYS[method]`).
    """
    method = importance_reweighting_method
    if method not in PG_METHODS:
        raise ValueError(f"importance_reweighting_method must be one of {PG_METHODS}, got {method!r}")
    if policy_log_probs.ndim != 2:
        raise ValueError(f"policy_log_probs must be (B, T), got {tuple(policy_log_probs.shape)}")
    log_probs = upcast_half(policy_log_probs)
    advantages = _sequence_advantages(raw_rewards_or_advantages, log_probs.shape[0])  # (B, 1)
    _check_same_shape("response_mask", response_mask, log_probs, "policy_log_probs")
    mask = (response_mask if response_mask is not None else torch.ones_like(log_probs)).to(log_probs.dtype)
    token_count = mask.sum().detach()

    if method == "none":
        loss = -advantages * log_probs
        return loss, {"on_policy_loss_mean": _masked_token_mean(loss, mask, token_count)}

    if old_log_probs is None:
        raise ValueError(f"old_log_probs (B, T) is required for importance_reweighting_method={method!r}")
    _check_same_shape("old_log_probs", old_log_probs, log_probs, "policy_log_probs")
    if method != "noclip" and (cliprange is None or not cliprange > 0):
        raise ValueError(f"cliprange must be a positive float for {method!r}, got {cliprange!r}")
    if method == "gspo" and response_mask is None:
        raise ValueError("response_mask (B, T) is required for 'gspo': its ratio averages over response tokens")

    log_ratio = log_probs - upcast_half(old_log_probs).detach()  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    metadata: dict[str, torch.Tensor] = {}
    if method == "noclip":
        loss = -advantages * ratio
    elif method == "grpo":
        _, _, loss = clipped_surrogate(ratio, advantages, cliprange, cliprange)
        # a token is "clipped" only where clipping removes its gradient
        is_clipped = ((advantages > 0) & (ratio > 1 + cliprange)) | ((advantages < 0) & (ratio < 1 - cliprange))
        metadata.update(_clip_stats(is_clipped.to(mask.dtype) * mask, token_count))
    elif method == "cispo":
        loss = cispo_loss(ratio, advantages, log_probs, cliprange)
        is_clipped = ratio > 1 + cliprange
        metadata.update(_clip_stats(is_clipped.to(mask.dtype) * mask, token_count))
    else:  # gspo
        lengths = mask.sum(dim=1, keepdim=True)  # (B, 1)
        seq_log_ratio = (log_ratio * mask).sum(dim=1, keepdim=True) / lengths.clamp_min(1)
        seq_ratio = torch.exp(seq_log_ratio)  # (B, 1) geometric mean of the token ratios
        _, _, seq_loss = clipped_surrogate(seq_ratio, advantages, cliprange, cliprange)  # (B, 1)
        loss = seq_loss.expand_as(log_probs)
        non_empty = (lengths > 0).to(mask.dtype)  # (B, 1)
        sequence_count = non_empty.sum().detach()
        is_clipped = ((advantages > 0) & (seq_ratio > 1 + cliprange)) | (
            (advantages < 0) & (seq_ratio < 1 - cliprange)
        )
        metadata.update(_clip_stats(is_clipped.to(mask.dtype) * non_empty, sequence_count))
        metadata["importance_ratio_mean"] = _masked_token_mean(seq_ratio, non_empty, sequence_count)
        metadata["importance_ratio_count"] = sequence_count
        metadata["off_policy_loss_mean"] = _masked_token_mean(loss, mask, token_count)
        return loss, metadata

    metadata["importance_ratio_mean"] = _masked_token_mean(ratio, mask, token_count)
    metadata["importance_ratio_count"] = token_count
    metadata["off_policy_loss_mean"] = _masked_token_mean(loss, mask, token_count)
    return loss, metadata


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, the one loss core of both loss APIs: (−r·A, −clip(r)·A, their max).

    ratio (B, T) or (B, 1), advantages broadcastable to it; clip(r) = clamp(r, 1 − clip_low,
    1 + clip_high). The max of the two losses is −min(r·A, clip(r)·A): the pessimistic bound.
    """
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    unclipped, clipped = torch.broadcast_tensors(unclipped, clipped)
    return unclipped, clipped, torch.maximum(unclipped, clipped)


def cispo_loss(
    ratio: torch.Tensor, advantages: torch.Tensor, log_probs: torch.Tensor, clip_high: float
) -> torch.Tensor:
    """CISPO: −sg(min(r, 1 + clip_high)) · A · log π, (B, T); the capped weight never drops a token."""
    weight = torch.clamp(ratio, max=1 + clip_high).detach()
    return (-advantages * weight * log_probs).expand_as(log_probs)


def _clip_stats(clipped: torch.Tensor, total: torch.Tensor) -> dict[str, torch.Tensor]:
    count = clipped.sum().detach()
    return {"clip_fraction": count / total.clamp_min(1), "clip_count": count, "clip_total": total}


@dataclass
class GRPOLossConfig:
    """The fields `compute_grpo_loss` reads (open-instruct's ExperimentConfig subset)."""

    loss_fn: str = "dapo"
    """"dapo" (PPO-clip with decoupled bounds) or "cispo" (capped, detached weight × log π)."""
    clip_lower: float = 0.2
    """ε_low: the ratio is clipped below at 1 − clip_lower (dapo only)."""
    clip_higher: float = 0.2
    """ε_high: clipped above at 1 + clip_higher (DAPO's clip-higher uses 0.28); CISPO's cap."""
    kl_estimator: int = 2
    """0: k1 = δ, 1: k2 = δ²/2, 2: k3 = exp(−δ) − 1 + δ, 3: ratio·δ, with δ = log π − log π_ref."""
    beta: float = 0.0
    """Weight of the KL penalty in the total loss pg_loss_max + beta·kl."""

    def __post_init__(self) -> None:
        _validate_grpo_config(self)


def _validate_grpo_config(config) -> None:
    for field in ("loss_fn", "clip_lower", "clip_higher", "kl_estimator", "beta"):
        if not hasattr(config, field):
            raise ValueError(f"config must have a {field!r} attribute (see GRPOLossConfig)")
    if config.loss_fn not in GRPO_LOSS_FNS:
        raise ValueError(f"config.loss_fn must be one of {GRPO_LOSS_FNS}, got {config.loss_fn!r}")
    if config.kl_estimator not in (0, 1, 2, 3):
        raise ValueError(f"config.kl_estimator must be 0, 1, 2 or 3, got {config.kl_estimator!r}")
    if not (config.clip_lower >= 0 and config.clip_higher >= 0):
        raise ValueError(
            f"config.clip_lower and config.clip_higher must be >= 0, got {config.clip_lower}, {config.clip_higher}"
        )


def estimate_kl(
    new_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    estimator: int,
    ratio: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from samples of π (Schulman 2020), all (B, T).

    δ = log π − log π_ref (clamped to ±40 as open-instruct does);
    0: k1 = δ; 1: k2 = δ²/2; 2: k3 = exp(−δ) − 1 + δ; 3: ratio·δ (k1 importance-weighted by
    π/π_old, for off-policy samples). Gradients flow through new_logprobs (and ratio) only as written.
    """
    if estimator not in (0, 1, 2, 3) or isinstance(estimator, bool):
        raise ValueError(f"estimator must be 0, 1, 2 or 3, got {estimator!r}")
    _check_same_shape("ref_logprobs", ref_logprobs, new_logprobs, "new_logprobs")
    delta = (upcast_half(new_logprobs) - upcast_half(ref_logprobs)).clamp(-KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
    if estimator == 0:
        return delta
    if estimator == 1:
        return delta.pow(2) / 2
    if estimator == 2:
        return torch.expm1(-delta) + delta
    if ratio is None:
        raise ValueError("estimator 3 (ratio·δ) needs ratio (B, T)")
    _check_same_shape("ratio", ratio, new_logprobs, "new_logprobs")
    return upcast_half(ratio) * delta


def compute_grpo_loss(
    new_logprobs: torch.Tensor,
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    config,
    tis_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """open-instruct's per-token GRPO loss: (pg_losses, pg_losses2, pg_loss_max, kl), each (B, T).

    Args:
        new_logprobs: (B, T) log π (with gradient).
        ratio: (B, T) exp(log π − log π_old), carrying the gradient of log π.
        advantages: (B, T) per-token advantages ((B,) or (B, 1) broadcast over T).
        ref_logprobs: (B, T) log π_ref, or None for no KL (kl is zeros).
        config: object with loss_fn, clip_lower, clip_higher, kl_estimator, beta.
        tis_weights: (B, T) truncated importance weights; multiply pg_loss_max, never kl.
    """
    _validate_grpo_config(config)
    if new_logprobs.ndim != 2:
        raise ValueError(f"new_logprobs must be (B, T), got {tuple(new_logprobs.shape)}")
    _check_same_shape("ratio", ratio, new_logprobs, "new_logprobs")
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(-1)
    if advantages.shape not in (new_logprobs.shape, (new_logprobs.shape[0], 1)):
        raise ValueError(
            f"advantages must be (B, T), (B, 1) or (B,) for new_logprobs {tuple(new_logprobs.shape)}, "
            f"got {tuple(advantages.shape)}"
        )
    _check_same_shape("tis_weights", tis_weights, new_logprobs, "new_logprobs")
    new_logprobs, ratio, advantages = upcast_half(new_logprobs), upcast_half(ratio), upcast_half(advantages)

    if config.loss_fn == "dapo":
        pg_losses, pg_losses2, pg_loss_max = clipped_surrogate(ratio, advantages, config.clip_lower, config.clip_higher)
    else:  # cispo
        pg_losses = pg_losses2 = pg_loss_max = cispo_loss(ratio, advantages, new_logprobs, config.clip_higher)
    if tis_weights is not None:
        pg_loss_max = pg_loss_max * upcast_half(tis_weights).detach()

    if ref_logprobs is None:
        kl = torch.zeros_like(new_logprobs)
    else:
        kl = estimate_kl(new_logprobs, ref_logprobs, config.kl_estimator, ratio=ratio)
    return pg_losses, pg_losses2, pg_loss_max, kl


def truncated_importance_weights(
    old_log_probs: torch.Tensor,
    sampler_log_probs: torch.Tensor,
    cap: float,
    response_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Truncated importance weights min(π_old/π_sampler, cap), detached, 0 off the mask: (B, T).

    Corrects for the sampler (e.g. a bf16 vLLM engine) and the trainer disagreeing about π_old
    (Yao et al. 2025; open-instruct `maybe_apply_importance_sampling`). Computed as
    exp(min(δ, log cap)) so that a huge δ cannot overflow to inf before the cap applies.
    """
    if not (isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0):
        raise ValueError(f"cap must be a positive number, got {cap!r}")
    _check_same_shape("sampler_log_probs", sampler_log_probs, old_log_probs, "old_log_probs")
    _check_same_shape("response_mask", response_mask, old_log_probs, "old_log_probs")
    with torch.no_grad():
        log_weight = upcast_half(old_log_probs) - upcast_half(sampler_log_probs)  # (B, T)
        weights = torch.exp(torch.clamp(log_weight, max=math.log(cap)))
        if response_mask is not None:
            weights = torch.where(response_mask.bool(), weights, torch.zeros_like(weights))
    return weights
