"""Trust regions as masks: drop a token whose probability moved too far, instead of clipping it.

PPO's clip keeps a token but stops its gradient past 1 ± ε of the RATIO. Two 2026 trainers drop
tokens by other measures, and compare π with the sampler μ that drew them:
  DPPO's binary trust region (prime-rl's default loss; DPPO, arXiv 2602.04879): with
  p = π(o_t), q = μ(o_t), a token is dropped when its probability moved past δ in the direction
  the advantage pushes it:  A > 0 and p − q > δ_high,  or  A ≤ 0 and p − q < −δ_low.
  |p − q| is the token's share of the total-variation distance; a ratio bound would drop a rare
  token (q = 0.001 → p = 0.003, r = 3) that moved a negligible probability mass.
  The loss of the kept tokens is −A·r with r = p/q unclipped, plus τ·(log r)² on every token
  (Kimi K2.5, arXiv 2602.02276): prime-rl `default_loss_fn` (δ_low = δ_high = 0.2, τ = 1e-3).
  The outlier mask (TRL's `vllm_importance_sampling_mode="token_mask"`): weight 0 where the ratio
  lies outside [low, high] (`vllm_importance_sampling_clip_min`, `_clip_max`).
A sequence-level ratio is a product exp(Σ_t log r_t) or a geometric mean exp(mean_t log r_t). The
product's log is a sum of T noisy terms: its spread grows like √T, and a cap on it then throws away
most of the weight even where the two policies agree on average. TRL #5814 (2026-05-22) measured
a mean sequence ratio of 0.569 with the product against 0.993 with the mean, on the same tokens.
Sources: prime-rl `src/prime_rl/trainer/rl/loss.py` (commit 559b447, 2026-08-21); TRL
`trl/trainer/grpo_trainer.py` (1.10.0.dev0, f2cd577). Shapes (B, T); masks are bool (B, T).
"""

from __future__ import annotations

import torch

from course.frontier.policy_losses import _non_negative, masked_inputs

SEQUENCE_RATIO_LEVELS = ("product", "geometric")


def trust_region_mask(log_probs: torch.Tensor, base_log_probs: torch.Tensor,
                      advantages: torch.Tensor, response_mask: torch.Tensor | None = None,
                      delta_low: float = 0.2, delta_high: float = 0.2) -> torch.Tensor:
    """DPPO's keep mask (B, T), bool: False off the response and where the token's probability
    moved past δ in the advantage's direction (prime-rl `default_loss_fn`, `dppo_mask_low`,
    `dppo_mask_high`, 0.2 each). Probabilities, not log-probs: p − q with p = exp(log π)."""
    _non_negative("delta_low", delta_low)
    _non_negative("delta_high", delta_high)
    if base_log_probs is None:
        raise ValueError("base_log_probs must be given: the mask compares π with the sampler's")
    new, log_ratio, advantages, mask = masked_inputs(log_probs, base_log_probs, advantages,
                                                     response_mask)
    with torch.no_grad():
        p = torch.exp(new)  # (B, T); 1 off the mask
        q = torch.exp(new - log_ratio)  # (B, T) the base's probabilities, masked the same
        moved = p - q
        dropped = torch.where(advantages > 0, moved > delta_high, moved < -delta_low)
    return mask & ~dropped


def dppo_loss(log_probs: torch.Tensor, base_log_probs: torch.Tensor, advantages: torch.Tensor,
              response_mask: torch.Tensor | None = None, delta_low: float = 0.2,
              delta_high: float = 0.2, kl_tau: float = 1e-3) -> torch.Tensor:
    """prime-rl's default loss (B, T): −keep·A·r + τ·(log r)², r = π/π_b unclipped, keep =
    `trust_region_mask`. DPPO-Binary-TV (arXiv 2602.04879) plus Kimi K2.5's squared log-ratio
    (arXiv 2602.02276); prime-rl `default_loss_fn` (559b447). Dropped tokens keep the τ term and
    count in the normalization, as in prime-rl (its loss is divided by all loss-mask tokens)."""
    _non_negative("kl_tau", kl_tau)
    keep = trust_region_mask(log_probs, base_log_probs, advantages, response_mask, delta_low,
                             delta_high)
    _, log_ratio, advantages, mask = masked_inputs(log_probs, base_log_probs, advantages,
                                                   response_mask)
    ratio = torch.exp(log_ratio)  # (B, T); masked inputs, so finite wherever the inputs are
    loss = torch.where(keep, -advantages * ratio, 0) + kl_tau * log_ratio.pow(2)
    return torch.where(mask, loss, 0)


def outlier_mask(log_ratio: torch.Tensor, response_mask: torch.Tensor,
                 low: float | None = None, high: float | None = None) -> torch.Tensor:
    """Keep (B, T), bool: on the mask and low ≤ exp(log r) ≤ high (a bound of None is off).

    TRL's `token_mask` importance-sampling mode: ratios outside [clip_min, clip_max] weigh 0
    (grpo_trainer.py, f2cd577). Compared in log space, after masking: a masked inf or nan
    neither passes nor reaches a gradient (the mask is a comparison, with no gradient).
    """
    for name, bound in (("low", low), ("high", high)):
        if bound is not None:
            _non_negative(name, bound)
    if low is not None and high is not None and not low <= high:
        raise ValueError(f"low must be at most high, got {low!r} and {high!r}")
    if log_ratio.shape != response_mask.shape:
        raise ValueError(f"response_mask must be {tuple(log_ratio.shape)} like log_ratio, "
                         f"got {tuple(response_mask.shape)}")
    mask = response_mask.bool()
    with torch.no_grad():
        ratio = torch.exp(torch.where(mask, log_ratio.detach(), 0).double())
        keep = mask.clone()
        if low is not None:
            keep &= ratio >= low
        if high is not None:
            keep &= ratio <= high
    return keep


def sequence_log_ratio(log_ratio: torch.Tensor, response_mask: torch.Tensor,
                       level: str = "geometric") -> torch.Tensor:
    """log of one ratio per sequence (B, 1): "product" Σ_t log r_t (TRL's `sequence_*` modes,
    f2cd577; verl `sequence`), "geometric" the masked mean (1/|o|)·Σ_t log r_t (GSPO, arXiv
    2507.18071; the fix proposed in TRL #5815). GMPO's loss (verl's policy loss `geo_mean`,
    `policy_losses.gmpo_loss`) takes the same mean of a log r clipped first. An empty row gives 0
    (ratio 1)."""
    if level not in SEQUENCE_RATIO_LEVELS:
        raise ValueError(f"level must be one of {SEQUENCE_RATIO_LEVELS}, got {level!r}")
    if log_ratio.shape != response_mask.shape:
        raise ValueError(f"response_mask must be {tuple(log_ratio.shape)} like log_ratio, "
                         f"got {tuple(response_mask.shape)}")
    mask = response_mask.bool()
    total = torch.where(mask, log_ratio, 0).sum(dim=1, keepdim=True)  # (B, 1)
    if level == "product":
        return total
    return total / mask.sum(dim=1, keepdim=True).clamp_min(1)
