"""`FrontierLoss`: the 2025–26 losses as one configuration that `grpo_train_step` takes as its
`grpo_loss`, a `course.train_step.PerTokenLoss` (it computes the whole per-token loss). Ungraded.
Its fields are stage 5's `GRPOLossConfig`'s (`loss_fn`, `clip_lower`, `clip_higher`,
`kl_estimator`, `beta`, checked by the one `course.off_policy.validate_grpo_config`) and the options
of notebook 11.

    ℓ_t = keep_t · w_t · pg_t + β · kl_t
pg is `loss_fn`'s loss (`course.frontier.policy_losses`, `course.frontier.trust_region.dppo_loss`)
with the ratio r = π/π_b against π_b = π_old (`ratio_against="old"`, PPO's) or the sampler μ
("sampler": prime-rl's and SkyRL's `cispo_anchor="rollout"`, SkyRL PR #1859, 2026-07-01); w the
train step's truncated importance weights min(π_old/μ, cap) (only against π_old: against μ the
ratio holds that correction already); keep the optional outlier mask
(`course.frontier.trust_region.outlier_mask`); kl = `estimate_kl` of π against π_ref. Every term is
per token, so the train step's normalization keeps the update exact under any micro-batching and
over data-parallel ranks.

Why the sampler: a trainer that recomputes π_old from the weights it is about to update, and
takes one optimizer step per batch, has π_old = π in value: r ≡ 1, PPO's clip and CISPO's cap
never act (SkyRL #1859: "stock CISPO is effectively inert"). Against μ, r − 1 carries the
sampler's staleness and its numerical mismatch, and the clip acts on those.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from course.frontier.policy_losses import (
    dual_clip_loss,
    floored_cispo_loss,
    gmpo_log_ratio,
    gmpo_loss,
    masked_inputs,
    sapo_loss,
)
from course.frontier.trust_region import dppo_loss, outlier_mask, trust_region_mask
from course.off_policy import estimate_kl, validate_grpo_config
from course.variants import FRONTIER_LOSS_FNS, RATIO_AGAINST


@dataclass(frozen=True)
class FrontierLoss:
    """What `per_token_loss` computes; every field is checked at construction (ValueError)."""

    loss_fn: str = "dapo"
    """dapo (PPO-clip with decoupled bounds; the dual clip with `dual_clip`), cispo, sapo, gmpo or
    dppo: stage 5's names, and the three of notebook 11."""
    clip_lower: float = 0.2
    """ε_low: dapo's and cispo's ratio bound 1 − ε_low; gmpo's log-space bound −ε_low."""
    clip_higher: float = 0.2
    """ε_high: dapo's and cispo's 1 + ε_high; gmpo's log-space bound ε_high."""
    dual_clip: float | None = None
    """c > 1 of dual-clip PPO (dapo only; verl's `clip_ratio_c` = 3); None: off."""
    cispo_floor: bool = False
    """cispo: clamp the weight below at 1 − ε_low too (verl); False: capped above only (MiniMax-M1,
    open-instruct and stage 5), as `--cispo-floor`'s default."""
    tau_pos: float = 1.0
    """SAPO's temperature where A > 0."""
    tau_neg: float = 1.05
    """SAPO's temperature where A ≤ 0."""
    trust_region: float = 0.0
    """δ of DPPO's probability mask (dppo: both sides; 0.2 in prime-rl). Others: 0, off."""
    ratio_kl: float = 0.0
    """dppo's τ of τ·(log r)² (1e-3 in prime-rl)."""
    ratio_against: str = "old"
    """old (π_old) or sampler (μ, the rollout's log-probs)."""
    outlier_low: float | None = None
    """Drop tokens whose ratio is below this (TRL's `token_mask` clip_min); None: off."""
    outlier_high: float | None = None
    """Drop tokens whose ratio is above this (TRL's clip_max); None: off."""
    kl_estimator: str = "k3"
    """The KL penalty's estimator, as `estimate_kl`'s."""
    beta: float = 0.0
    """β of the KL penalty to π_ref."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """A ValueError naming the first field out of range."""
        validate_grpo_config(self, FRONTIER_LOSS_FNS)
        if self.ratio_against not in RATIO_AGAINST:
            raise ValueError(f"ratio_against must be one of {RATIO_AGAINST}, "
                             f"got {self.ratio_against!r}")
        for name in ("trust_region", "ratio_kl", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        for name in ("tau_pos", "tau_neg"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.dual_clip is not None and (self.loss_fn != "dapo" or not self.dual_clip > 1):
            raise ValueError(f"dual_clip must be None or a number > 1 with loss_fn 'dapo', got "
                             f"{self.dual_clip!r} with {self.loss_fn!r}")
        if self.loss_fn == "dppo" and not self.trust_region > 0:
            raise ValueError(f"trust_region must be > 0 for loss_fn 'dppo', "
                             f"got {self.trust_region!r}")
        if self.loss_fn != "dppo" and (self.trust_region or self.ratio_kl):
            raise ValueError(f"trust_region and ratio_kl are dppo's, got {self.trust_region!r} "
                             f"and {self.ratio_kl!r} with loss_fn {self.loss_fn!r}")
        low, high = self.outlier_low, self.outlier_high
        if (low is not None and not low >= 0) or (high is not None and not high > 0) or (
                low is not None and high is not None and not low <= high):
            raise ValueError(f"outlier_low and outlier_high must satisfy 0 <= low <= high, "
                             f"got {low!r} and {high!r}")

    def policy_loss(self, log_probs: torch.Tensor, base_log_probs: torch.Tensor,
                    advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """`loss_fn`'s per-token policy loss (B, T), 0 off the mask."""
        arguments = (log_probs, base_log_probs, advantages, response_mask)
        if self.loss_fn == "sapo":
            return sapo_loss(*arguments, self.tau_pos, self.tau_neg)
        if self.loss_fn == "gmpo":
            return gmpo_loss(*arguments, self.clip_lower, self.clip_higher)
        if self.loss_fn == "cispo":
            low = self.clip_lower if self.cispo_floor else None
            return floored_cispo_loss(*arguments, low, self.clip_higher)
        if self.loss_fn == "dppo":
            return dppo_loss(*arguments, self.trust_region, self.trust_region, self.ratio_kl)
        return dual_clip_loss(*arguments, self.clip_lower, self.clip_higher, self.dual_clip)

    def per_token_loss(self, micro: dict, log_probs: torch.Tensor, old: torch.Tensor,
                       weights: torch.Tensor | None, ref: torch.Tensor | None):
        """ℓ (b, T) and its metadata for one micro-batch of `grpo_train_step`: `micro` holds
        "advantages" (b,), "response_mask" and optionally "sampler_log_probs" (b, T); `old` is
        log π_old (b, T); `weights` the TIS weights or None; `ref` log π_ref when β > 0."""
        mask = micro["response_mask"].bool()
        base = old
        if self.ratio_against == "sampler":
            base, weights = micro.get("sampler_log_probs", old), None
        advantages = micro["advantages"]
        loss = self.policy_loss(log_probs, base, advantages, mask)  # (b, T)
        _, log_ratio, advantages, _ = masked_inputs(log_probs, base, advantages, mask)
        keep = mask
        if self.outlier_low is not None or self.outlier_high is not None:
            keep = outlier_mask(log_ratio, mask, self.outlier_low, self.outlier_high)
            loss = torch.where(keep, loss, 0)
        if weights is not None:
            loss = loss * weights
        metadata = {"importance_ratio_mean": torch.exp(log_ratio.detach()),
                    "off_policy_loss_mean": loss.detach(),
                    **self._clip_counts(log_probs, base, log_ratio, advantages, mask, keep)}
        if self.beta > 0:
            new = torch.where(mask, log_probs, 0)
            kl = estimate_kl(new, torch.where(mask, ref, 0), self.kl_estimator,
                             ratio=torch.exp(log_ratio), response_mask=mask)
            loss = loss + self.beta * kl
            metadata["kl_mean"] = kl
        return loss, metadata

    def _clip_counts(self, log_probs, base, log_ratio, advantages, mask, keep) -> dict:
        """clip_fraction: the tokens the clip, the dual clip, the floor, the cap, the trust
        region or the outlier mask changed (SAPO has no edge: only the outlier mask counts)."""
        with torch.no_grad():
            ratio = torch.exp(log_ratio)
            if self.loss_fn == "dapo":
                changed = (((advantages > 0) & (ratio > 1 + self.clip_higher))
                           | ((advantages < 0) & (ratio < 1 - self.clip_lower)))
                if self.dual_clip is not None:
                    changed |= (advantages < 0) & (ratio > self.dual_clip)
            elif self.loss_fn == "cispo":
                changed = ratio > 1 + self.clip_higher
                if self.cispo_floor:
                    changed |= ratio < 1 - self.clip_lower
            elif self.loss_fn == "gmpo":
                clipped = gmpo_log_ratio(log_ratio, advantages, self.clip_lower, self.clip_higher)
                changed = clipped != log_ratio
            elif self.loss_fn == "dppo":
                changed = ~trust_region_mask(log_probs, base, advantages, mask,
                                             self.trust_region, self.trust_region)
            else:
                changed = torch.zeros_like(mask)
            count = ((changed | ~keep) & mask).sum()
        total = mask.sum()
        return {"clip_fraction": count / total.clamp_min(1), "clip_count": count,
                "clip_total": total}
