"""Stage 4 — the per-token policy-gradient losses, REINFORCE to CISPO.

With r_t = π(o_t)/π_old(o_t) = exp(log π − sg(log π_old)) and a sequence advantage A (sg =
stop-grad):
  none    −A · log π                                  REINFORCE (Williams 1992)
  noclip  −A · r                                      importance-weighted policy gradient
  grpo    −min(r·A, clip(r, 1−ε, 1+ε)·A)              PPO-clip (Schulman et al. 2017, arXiv
                                                      1707.06347) as used by GRPO (Shao et al.
                                                      2024, arXiv 2402.03300)
  gspo    −min(s·A, clip(s, 1−ε, 1+ε)·A),  s = exp(mean_t log r_t)
                                                      GSPO (Zheng et al. 2025, arXiv 2507.18071):
                                                      one geometric-mean ratio per sequence,
                                                      broadcast over T
  cispo   −sg(min(r, 1+ε)) · A · log π                CISPO (MiniMax-M1, arXiv 2506.13585): the
                                                      weight is capped but, being detached,
                                                      never drops a token
The loss core (`clipped_surrogate`, `cispo_loss`) is shared with stage 5's `compute_grpo_loss`
(`course.off_policy`), which adds the KL penalty and truncated importance sampling.
Shapes: B sequences × T positions; advantages are (B,) or (B, 1) per sequence.
Every input is masked BEFORE any nonlinearity (exp, log, clamp): a masked inf or nan selected away
only afterwards leaves the value finite but makes the gradient nan (0·∞ in backward).
"""

from __future__ import annotations

import torch

from course.variants import PG_METHODS  # this stage's names, torch-free there

# Metadata that are plain counts (summed over micro-batches and ranks); the other keys are means.
PG_COUNT_KEYS = ("clip_count", "clip_total", "importance_ratio_count")


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
        raise ValueError(f"policy_log_probs must be (B, T), got "
                         f"{tuple(policy_log_probs.shape)}")
    log_probs = (policy_log_probs.float() if policy_log_probs.dtype in (torch.float16,
                 torch.bfloat16) else policy_log_probs)
    B = log_probs.shape[0]
    advantages = raw_rewards_or_advantages
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(-1)
    if tuple(advantages.shape) != (B, 1):
        raise ValueError(f"raw_rewards_or_advantages must be (B,) or (B, 1) with "
                         f"B={B}, got {tuple(raw_rewards_or_advantages.shape)}")
    advantages = advantages.to(log_probs.dtype)  # (B, 1)
    if response_mask is not None and response_mask.shape != log_probs.shape:
        raise ValueError(f"response_mask must be {tuple(log_probs.shape)}, got "
                         f"{tuple(response_mask.shape)}")
    mask = (torch.ones_like(log_probs, dtype=torch.bool) if response_mask is None
            else response_mask.bool())  # (B, T)
    # Mask the inputs before any nonlinearity: selecting the loss afterwards keeps a
    # masked inf or nan out of the value, but backward through exp of it is 0·∞ = nan.
    log_probs = torch.where(mask, log_probs, 0)  # (B, T)
    if method == "none":
        loss = -advantages * log_probs
        return loss, {"on_policy_loss_mean": _metric_mean(loss, mask, mask.sum())}
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
            log_ratio.sum(dim=1, keepdim=True) / lengths.clamp_min(1))  # (B, 1)
        counted = lengths > 0  # non-empty sequences
    else:
        ratio = torch.exp(log_ratio)  # (B, T)
        counted = mask
    clipped = None  # noclip clips nothing
    if method == "noclip":
        loss = -advantages * ratio
    elif method == "cispo":
        loss = cispo_loss(ratio, advantages, log_probs, cliprange)
        clipped = ratio > 1 + cliprange  # the weight is capped
    else:  # grpo, gspo
        _, _, loss = clipped_surrogate(ratio, advantages, cliprange, cliprange)
        # clipped = the min picked the clipped term and so removed this token's gradient
        clipped = (((advantages > 0) & (ratio > 1 + cliprange))
                   | ((advantages < 0) & (ratio < 1 - cliprange)))
    # gspo: one value per sequence -> (B, T)
    loss = loss.expand_as(log_probs).contiguous()
    return loss, _off_policy_metadata(loss, ratio, mask, counted, clipped)


def _metric_mean(values: torch.Tensor, where: torch.Tensor,
                count: torch.Tensor) -> torch.Tensor:
    """A metric: the detached `values` summed where `where`, over `count` (>= 1)."""
    return torch.where(where, values.detach(), 0).sum() / count.clamp_min(1)


def _off_policy_metadata(loss: torch.Tensor, ratio: torch.Tensor, mask: torch.Tensor,
                        counted: torch.Tensor, clipped: torch.Tensor | None) -> dict:
    """The metadata of a loss with a ratio: the mean ratio over the `counted` tokens (or
    sequences, gspo) and their count, the mean loss over the mask, and, but for noclip
    (`clipped` None), the fraction and count of those the clip changed."""
    n_counted = counted.sum()
    metadata = {
        "importance_ratio_mean": _metric_mean(ratio, counted, n_counted),
        "importance_ratio_count": n_counted,
        "off_policy_loss_mean": _metric_mean(loss, mask, mask.sum()),
    }
    if clipped is not None:
        clip_count = (clipped & counted).sum()
        metadata.update(
            clip_fraction=clip_count / n_counted.clamp_min(1),
            clip_count=clip_count,
            clip_total=n_counted,
        )
    return metadata


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_lower: float, clip_higher: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, the loss core of both loss APIs.

    Returns (−r·A, −clip(r)·A, their max), with clip(r) = clamp(r, 1 − clip_lower,
    1 + clip_higher); ratio (B, T) or (B, 1), advantages broadcastable to it. The max
    of the two losses is −min(r·A, clip(r)·A): the pessimistic bound.
    """
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_lower, 1 + clip_higher)
    unclipped, clipped = torch.broadcast_tensors(unclipped, clipped)
    return unclipped, clipped, torch.maximum(unclipped, clipped)


def cispo_loss(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    log_probs: torch.Tensor,
    clip_higher: float,
) -> torch.Tensor:
    """CISPO: −sg(min(r, 1 + clip_higher)) · A · log π, (B, T).

    The weight is capped and detached, so it never drops a token's gradient.
    """
    weight = torch.clamp(ratio, max=1 + clip_higher).detach()
    return (-advantages * weight * log_probs).expand_as(log_probs)
