"""Two advantages beside GRPO's group normalization (stage 3, `course.advantages`): RLOO's
leave-one-out baseline and REINFORCE++'s batch normalization. Ungraded; nothing trains with them.

On B = n · G rewards r (B,) in consecutive groups of G (the layout of stage 3):
  RLOO        A_i = r_i − (1/(G−1)) Σ_{j≠i, j in i's group} r_j
              Kool, van Hoof and Welling 2019 ("Buy 4 REINFORCE samples, get a baseline for
              free!"); Ahmadian et al. 2024, arXiv 2402.14740. The baseline leaves r_i out, so it
              is independent of sample i and the estimator stays unbiased; algebraically
              A_i = G/(G−1) · (r_i − mean_group), Dr. GRPO's advantage times a constant.
  REINFORCE++ A_i = (r_i − mean_batch) / (std_batch + ε)
              Hu 2025, arXiv 2501.03262: no group baseline; the whole batch's mean and (unbiased,
              n − 1) std, ε outside the square root as in stage 3. With `group_baseline`, the
              group mean is subtracted first and the batch std divides after (REINFORCE++-baseline,
              OpenRLHF's `advantage_estimator="reinforce_baseline"`, openrlhf/trainer/ppo_utils/
              experience_maker.py). With outcome rewards and no KL in the reward, every token's
              return is its sequence's reward, so one advantage per sequence is REINFORCE++'s.
Worked by hand, G = 4, the groups (1, 0, 0, 1) and (1, 0, 0, 0):
  RLOO                   (2/3, −2/3, −2/3, 2/3), (1, −1/3, −1/3, −1/3)
  REINFORCE++            batch mean 3/8, std √(15/56) = 0.5175: a 1 gets 1.2076, a 0 −0.7246
  REINFORCE++-baseline   (0.5, −0.5, −0.5, 0.5), (0.75, −0.25, −0.25, −0.25) over std 1/2:
                         (1, −1, −1, 1), (1.5, −0.5, −0.5, −0.5)
What tells them apart: a group whose G rewards are equal. RLOO and GRPO give it A = 0 (no
signal); REINFORCE++ without the group baseline pushes an all-correct group up and an all-wrong
one down, as the batch's other groups set the baseline.

A run would reach them through the advantage arguments of `grpo_train_step`: RLOO is stage 3's
baseline="mean", advantage_normalizer="none" times G/(G−1); REINFORCE++ needs the batch's mean and
std, over every data-parallel rank (an all-reduce of Σr, Σr² and the count) before any micro-batch.
"""

from __future__ import annotations

import torch


def _grouped(raw_rewards: torch.Tensor, group_size: int, least: int) -> torch.Tensor:
    """(B,) rewards as (n, G) float, or ValueError naming the argument."""
    if not isinstance(raw_rewards, torch.Tensor) or raw_rewards.ndim != 1:
        raise ValueError(f"raw_rewards must be a 1-D tensor (B,), got "
                         f"{getattr(raw_rewards, 'shape', type(raw_rewards))}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < least:
        raise ValueError(f"group_size must be an int >= {least}, got {group_size!r}")
    if raw_rewards.numel() == 0 or raw_rewards.numel() % group_size:
        raise ValueError(f"raw_rewards has {raw_rewards.numel()} entries, not a positive "
                         f"multiple of group_size={group_size}")
    rewards = raw_rewards if raw_rewards.is_floating_point() else raw_rewards.float()
    return rewards.reshape(-1, group_size)                                     # (n, G)


def rloo_advantages(raw_rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Leave-one-out advantages (B,): each reward minus the mean of the G − 1 others of its group.

    (Σ_group r − r_i) / (G − 1) is the others' mean; G ≥ 2 (one sample has no others)."""
    grouped = _grouped(raw_rewards, group_size, least=2)                       # (n, G)
    others_mean = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)  # (n, G)
    return (grouped - others_mean).reshape(-1)


def reinforce_pp_advantages(raw_rewards: torch.Tensor, group_size: int,
                            group_baseline: bool = False, eps: float = 1e-6) -> torch.Tensor:
    """REINFORCE++ advantages (B,): rewards (or, with `group_baseline`, rewards minus their group's
    mean) centered on the batch mean and divided by the batch's unbiased std + `eps`.

    Centering after the group baseline changes nothing (those values have batch mean 0); a batch
    of one reward has no std, so it needs B ≥ 2."""
    grouped = _grouped(raw_rewards, group_size, least=1)                       # (n, G)
    if grouped.numel() < 2:
        raise ValueError("raw_rewards needs at least 2 entries: the std of one reward is undefined")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    if group_baseline:
        grouped = grouped - grouped.mean(dim=1, keepdim=True)                  # (n, G)
    flat = grouped.reshape(-1)                                                 # (B,)
    return (flat - flat.mean()) / (flat.std() + eps)
