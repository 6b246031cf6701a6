"""The policy losses of 2025–26 that stages 4 and 5 leave out: a soft gate, a geometric mean,
a dual clip and a floored CISPO weight. Ungraded: a trainer reads them through `FrontierLoss`.

With r_t = π(o_t)/π_b(o_t) = exp(log π − sg(log π_b)), π_b the policy the ratio is taken against
(π_old, or the sampler μ: `FrontierLoss.ratio_against`), and a sequence advantage A:
  sapo   −(4/τ)·σ(τ·(r − 1))·A,  τ = τ_pos if A > 0 else τ_neg      SAPO, Qwen 2025 (arXiv
         2511.20347); verl `compute_policy_loss_sapo` (τ_pos 1.0, τ_neg 1.05), TRL
         `loss_type="sapo"`
  gmpo   −A·exp(mean_t clip_A(log r_t)) per sequence, clip_A one-sided in log space:
         A > 0: min(log r, ε_high);  A < 0: max(log r, −ε_low)      GMPO 2025 (arXiv
         2507.20673); verl `geo_mean`, TRL `experimental/gmpo` (ε = 0.4 there)
  ppo    PPO-clip −min(r·A, clip(r, 1 − ε_low, 1 + ε_high)·A), and for A < 0 the dual clip
         min(that, −c·A): the loss of a bad token is at most c·|A|    Ye et al. 2020 (arXiv
         1912.09729); verl `vanilla`, `clip_ratio_c` = 3
  cispo  −sg(clamp(r, 1 − ε_low, 1 + ε_high))·A·log π                  CISPO (arXiv 2506.13585) as
         verl `cispo` computes it: floored too (stage 4's is capped above only)
Sources: verl `verl/trainer/ppo/core_algos.py` (0.8.0.dev, commit b178a3c, 2026-01-29); TRL
`trl/trainer/grpo_trainer.py`, `trl/experimental/gmpo/gmpo_trainer.py` (1.10.0.dev0, f2cd577).
The trust-region and outlier masks, the ratio against the sampler, and `FrontierLoss` itself are
`course.frontier.trust_region`'s. Shapes: B sequences × T positions; advantages (B,) or (B, 1).
Every input is masked BEFORE any nonlinearity (exp, clamp, sigmoid): a masked inf or nan selected
away only afterwards leaves the value finite but makes the gradient nan (0·∞ in backward).
"""

from __future__ import annotations

import torch

from course.losses import clipped_surrogate

# verl clamps log r to this before exp in its vanilla, SAPO and CISPO losses
LOG_RATIO_BOUND = 20.0


def masked_inputs(log_probs: torch.Tensor, base_log_probs: torch.Tensor | None,
                  advantages: torch.Tensor, response_mask: torch.Tensor | None):
    """(log π, log r, A, mask): log π and log r = log π − sg(log π_b) are (B, T) and 0 off the mask,
    A is (B, 1) in log π's dtype, mask (B, T) bool. A ValueError names a badly shaped argument.
    Without `base_log_probs`, π_b is π itself (detached): r = 1, an on-policy step."""
    if not isinstance(log_probs, torch.Tensor) or log_probs.ndim != 2:
        raise ValueError(f"log_probs must be a (B, T) tensor, got "
                         f"{tuple(getattr(log_probs, 'shape', ()))}")
    if log_probs.dtype in (torch.float16, torch.bfloat16):
        log_probs = log_probs.float()
    shape = tuple(log_probs.shape)
    if base_log_probs is not None and tuple(base_log_probs.shape) != shape:
        raise ValueError(f"base_log_probs must be {shape} like log_probs, "
                         f"got {tuple(base_log_probs.shape)}")
    if response_mask is not None and tuple(response_mask.shape) != shape:
        raise ValueError(f"response_mask must be {shape} like log_probs, "
                         f"got {tuple(response_mask.shape)}")
    advantages = advantages.unsqueeze(-1) if advantages.ndim == 1 else advantages
    if tuple(advantages.shape) != (shape[0], 1):
        raise ValueError(f"advantages must be (B,) or (B, 1) with B={shape[0]}, "
                         f"got {tuple(advantages.shape)}")
    mask = (torch.ones(shape, dtype=torch.bool, device=log_probs.device)
            if response_mask is None else response_mask.bool())
    new = torch.where(mask, log_probs, 0)  # (B, T)
    base = new.detach() if base_log_probs is None else base_log_probs.detach()
    log_ratio = new - torch.where(mask, base.to(new.dtype), 0)  # (B, T); 0 (r = 1) off the mask
    return new, log_ratio, advantages.to(new.dtype), mask


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def _non_negative(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")


def sapo_loss(log_probs: torch.Tensor, base_log_probs: torch.Tensor | None,
              advantages: torch.Tensor, response_mask: torch.Tensor | None = None,
              tau_pos: float = 1.0, tau_neg: float = 1.05) -> torch.Tensor:
    """SAPO's soft gate: −(4/τ)·σ(τ·(r − 1))·A per token (B, T), 0 off the mask.

    SAPO (arXiv 2511.20347, eqs. 5–6); verl `compute_policy_loss_sapo` (core_algos.py, b178a3c),
    TRL `loss_type="sapo"` (`sapo_temperature_pos`/`_neg`). τ = tau_pos where A > 0, tau_neg where
    A ≤ 0. At r = 1 the gate is 2/τ and its slope 1, PPO's gradient; away from 1 the gradient
    fades smoothly instead of stopping at a clip edge. log r is clamped to ±20 as verl does.
    """
    _positive("tau_pos", tau_pos)
    _positive("tau_neg", tau_neg)
    _, log_ratio, advantages, mask = masked_inputs(log_probs, base_log_probs, advantages,
                                                   response_mask)
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))  # (B, T)
    # (B, 1); tensors of the ratio's dtype: torch.where of two python floats is float32
    tau = torch.where(advantages > 0, ratio.new_tensor(tau_pos), ratio.new_tensor(tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1)) * (4 / tau)  # (B, T)
    return torch.where(mask, -gate * advantages, 0)


def gmpo_log_ratio(log_ratio: torch.Tensor, advantages: torch.Tensor, clip_lower: float,
                   clip_higher: float) -> torch.Tensor:
    """GMPO's one-sided clip of log r (B, T) in log space: where A > 0 at most ε_high, where A < 0
    at least −ε_low (PPO's pessimistic side, per token, before any mean)."""
    clamped = log_ratio.clamp(-clip_lower, clip_higher)
    return torch.where(advantages > 0, torch.minimum(log_ratio, clamped),
                       torch.maximum(log_ratio, clamped))


def gmpo_loss(log_probs: torch.Tensor, base_log_probs: torch.Tensor | None,
              advantages: torch.Tensor, response_mask: torch.Tensor | None = None,
              clip_lower: float = 0.4, clip_higher: float = 0.4) -> torch.Tensor:
    """GMPO: −A·exp(masked mean_t clip_A(log r_t)) per sequence, broadcast to (B, T).

    GMPO (arXiv 2507.20673); verl `geo_mean` (core_algos.py, b178a3c), TRL
    `experimental/gmpo/gmpo_trainer.py` (f2cd577; ε_low = ε_high = 0.4 there, verl reuses its
    clip_ratio). The geometric mean of the clipped token ratios, not their product: the product
    exp(Σ_t log r_t) grows with the length. Under "sequence" normalization the row's loss counts
    once, as in verl and TRL (a plain mean over sequences); an empty row weighs 0.
    """
    _non_negative("clip_lower", clip_lower)
    _non_negative("clip_higher", clip_higher)
    _, log_ratio, advantages, mask = masked_inputs(log_probs, base_log_probs, advantages,
                                                   response_mask)
    clipped = torch.where(mask, gmpo_log_ratio(log_ratio, advantages, clip_lower, clip_higher), 0)
    lengths = mask.sum(dim=1, keepdim=True)  # (B, 1)
    ratio = torch.exp(clipped.sum(dim=1, keepdim=True) / lengths.clamp_min(1))  # (B, 1)
    return torch.where(mask, -advantages * ratio, 0)  # (B, T)


def dual_clip_loss(log_probs: torch.Tensor, base_log_probs: torch.Tensor | None,
                   advantages: torch.Tensor, response_mask: torch.Tensor | None = None,
                   clip_lower: float = 0.2, clip_higher: float = 0.2,
                   clip_ratio_c: float | None = 3.0) -> torch.Tensor:
    """PPO-clip with decoupled bounds and, where A < 0, the dual clip: (B, T).

    ℓ = max(−r·A, −clip(r, 1 − ε_low, 1 + ε_high)·A), then where A < 0: min(ℓ, −c·A). Dual-clip
    PPO (Ye et al. 2020, arXiv 1912.09729); verl `vanilla` (core_algos.py, b178a3c;
    `clip_ratio_c` 3.0, which must exceed 1). Without the dual clip a token with A < 0 whose ratio
    grew to r costs r·|A|, unbounded; with it at most c·|A|, and past r = c it has no gradient.
    Where A > 0 nothing changes. `clip_ratio_c=None`: plain PPO-clip. log r clamped to ±20.
    """
    _non_negative("clip_lower", clip_lower)
    _non_negative("clip_higher", clip_higher)
    if clip_ratio_c is not None and (isinstance(clip_ratio_c, bool)
                                     or not isinstance(clip_ratio_c, (int, float))
                                     or not clip_ratio_c > 1):
        raise ValueError(f"clip_ratio_c must be a number > 1 (or None), got {clip_ratio_c!r}")
    _, log_ratio, advantages, mask = masked_inputs(log_probs, base_log_probs, advantages,
                                                   response_mask)
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))  # (B, T)
    _, _, loss = clipped_surrogate(ratio, advantages, clip_lower, clip_higher)  # stage 4's core
    if clip_ratio_c is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * clip_ratio_c), loss)
    return torch.where(mask, loss, 0)


def floored_cispo_loss(log_probs: torch.Tensor, base_log_probs: torch.Tensor | None,
                       advantages: torch.Tensor, response_mask: torch.Tensor | None = None,
                       clip_lower: float | None = 0.2, clip_higher: float = 0.2) -> torch.Tensor:
    """CISPO with verl's floor: −sg(clamp(r, 1 − ε_low, 1 + ε_high))·A·log π, (B, T).

    CISPO (MiniMax-M1, arXiv 2506.13585) as verl `cispo` computes it (core_algos.py, b178a3c):
    the detached weight is clamped with both clip bounds. MiniMax-M1 and ScaleRL (arXiv
    2510.13786) leave the lower bound off; `clip_lower=None` does that (stage 4's `cispo`).
    The weight never removes a token's gradient; it only bounds its size. log r clamped to ±20.
    """
    if clip_lower is not None:
        _non_negative("clip_lower", clip_lower)
    _non_negative("clip_higher", clip_higher)
    new, log_ratio, advantages, mask = masked_inputs(log_probs, base_log_probs, advantages,
                                                     response_mask)
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    low = None if clip_lower is None else 1 - clip_lower
    weight = ratio.clamp(low, 1 + clip_higher).detach()  # (B, T)
    return torch.where(mask, -weight * advantages * new, 0)
