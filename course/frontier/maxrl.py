"""MaxRL's advantage with the guard of prime-rl: what the mean normalizer does to a group of one and
to a group whose mean reward is not positive. Ungraded; `python -m course.train` routes a MaxRL run
through it (`maxrl_train_arguments`).

MaxRL (Tajwar, Zeng et al. 2026, arXiv 2602.02710) divides the centered reward by the group mean:
    A_i = (r_i − mean) / mean,
which for binary rewards weighs a prompt solved k times in G by G/k: hard prompts count more. The
graded stage-3 normalizer (`compute_group_normalized_rewards(..., advantage_normalizer="mean")`)
computes (r_i − mean)/(mean + ε). Two places where that goes wrong:
  a group of one   r − mean = 0, so A = 0 whatever the reward: a run with G = 1 learns nothing.
                   The paper's order-1 truncation is REINFORCE, A = r; prime-rl's PR #2985
                   (2026-07-09, open) makes that change ([1] → [0] becomes [1] → [1]).
  mean ≤ 0         only with rewards below 0 (a length penalty, a reward model): rewards (−1, 1)
                   have mean 0 and A = ±1/ε = ±10⁶ with ε = 1e-6; a negative mean flips every sign.
                   prime-rl's main branch gives such a group A = 0 ("carries no signal"), and
                   TRL's review of MaxRL (PR #5026) asks that binary rewards be stated as the
                   assumption.
The guard: A = r for G = 1; A = 0 for a group with mean ≤ 0; (r − mean)/mean otherwise (no ε: the
mean is positive). Rewards below 0 are refused: the estimator is derived for binary rewards.
Source: prime-rl `src/prime_rl/orchestrator/algo/max_rl.py` (commit 559b447, 2026-08-21), PR #2985.
"""

from __future__ import annotations

import torch

from course.advantages import compute_group_normalized_rewards


def maxrl_advantages(raw_rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Guarded MaxRL advantages (B,) of rewards (B,) ≥ 0 in consecutive groups of `group_size`.

    Groups of two or more go through stage 3's `compute_group_normalized_rewards` with ε = 0,
    which checks the shapes; a group with no success then gives 0/0, which becomes 0."""
    if not isinstance(raw_rewards, torch.Tensor) or raw_rewards.ndim != 1:
        raise ValueError(f"raw_rewards must be a 1-D tensor (B,), got "
                         f"{getattr(raw_rewards, 'shape', type(raw_rewards))}")
    rewards = raw_rewards if raw_rewards.is_floating_point() else raw_rewards.float()
    if not torch.isfinite(rewards).all() or (rewards < 0).any():
        raise ValueError("raw_rewards must be finite and >= 0 for MaxRL (binary rewards: arXiv "
                         "2602.02710), got a reward below 0 or not finite")
    if group_size == 1 and not isinstance(group_size, bool):
        return rewards.clone()  # REINFORCE: the order-1 truncation
    advantages, _ = compute_group_normalized_rewards(rewards, group_size, "mean", 0.0, "mean")
    return torch.nan_to_num(advantages, nan=0.0)  # (B,); 0/0 where no response succeeded


def maxrl_train_arguments(group_size: int) -> dict:
    """The graded train step's advantage arguments that compute `maxrl_advantages` for rewards
    in [0, 1] (the course's tasks): for G = 1, no baseline and no normalizer, A = r; otherwise
    the mean normalizer, which differs from the guarded value by the factor mean/(mean + 1e-6)
    only (a mean of 0 means every binary reward is 0, where both give 0)."""
    if group_size == 1:
        return {"baseline": "none", "advantage_normalizer": "none"}
    return {"baseline": "mean", "advantage_normalizer": "mean"}


def refuse_negative_rewards(reward_fn):
    """`reward_fn` that raises ValueError on a reward below 0: the MaxRL guard at run time."""
    def checked(response: str, ground_truth: str) -> dict[str, float]:
        scores = reward_fn(response, ground_truth)
        if not scores["reward"] >= 0:
            raise ValueError(f"advantage_normalizer 'mean' (MaxRL) needs rewards >= 0, got "
                             f"{scores['reward']!r}")
        return scores
    return checked
