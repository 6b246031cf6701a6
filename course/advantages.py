"""Stage 3 — rewards and group-normalized advantages.

GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300, §4.1.2) samples G responses per prompt and
scores each against its own group, so no value network is needed:
  A_i = (r_i − mean(r_group)) / (std(r_group) + ε)      baseline="mean", normalizer="std"
Variants, all on the same (n_groups, G) layout:
  Dr. GRPO (Liu et al. 2025, arXiv 2503.20783)  no std:   A_i = r_i − mean   normalizer="none"
  MaxRL                                    divide by mean: A_i = (r_i − mean)/(mean + ε)
  RFT / rejection-sampling fine-tuning     no baseline:    A_i = r_i          baseline="none"
std is the unbiased sample std (torch.std's default, n − 1), and ε is added outside the square root.
A group whose G rewards are equal gets A = 0 everywhere: it carries no learning signal.
Two ungraded options, which `python -m course.train` trains with (`course.advantage_options`, worked
by hand there): RLOO's baseline="leave_one_out" and REINFORCE++'s advantage_normalizer="batch".
"""

from __future__ import annotations

import torch

from course.advantage_options import whiten_over_batch
from course.variants import RUN_BASELINES, RUN_NORMALIZERS  # names (options too), torch-free


def compute_rollout_rewards(
    reward_fn, rollout_responses: list[str], repeated_ground_truths: list[str]
) -> tuple[torch.Tensor, dict[str, float]]:
    """Score B responses with reward_fn(response, ground_truth).

    reward_fn returns {"reward", "format_reward", "answer_reward"}. Returns
    (rewards (B,) float32, {"reward_mean", "format_reward_mean", "answer_reward_mean"}).
    """
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError(
            f"rollout_responses and repeated_ground_truths must have the same length, "
            f"got {len(rollout_responses)} and {len(repeated_ground_truths)}"
        )
    if len(rollout_responses) == 0:
        raise ValueError("rollout_responses is empty: there is nothing to score")
    keys = ("reward", "format_reward", "answer_reward")
    scores = [
        reward_fn(response, truth)
        for response, truth in zip(rollout_responses, repeated_ground_truths)
    ]
    table = torch.tensor(
        [[float(score[key]) for key in keys] for score in scores], dtype=torch.float32
    )  # (B, 3)
    metadata = {f"{key}_mean": table[:, k].mean().item() for k, key in enumerate(keys)}
    return table[:, 0].clone(), metadata


def compute_group_normalized_rewards(
    raw_rewards: torch.Tensor,
    group_size: int,
    baseline: str = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: str = "std",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Group-relative advantages: (B,) rewards in consecutive groups of G -> (B,), meta.

    baseline "mean" subtracts the group mean, "none" keeps r (RFT). normalizer "std"
    divides by (unbiased group std + eps) (GRPO, arXiv 2402.03300), "mean" by
    (group mean + eps) (MaxRL, arXiv 2602.02710), "none" not at all (Dr. GRPO,
    arXiv 2503.20783). Optional extensions, not graded: baseline "leave_one_out"
    subtracts the mean of the G − 1 others (RLOO, arXiv 2402.14740); normalizer
    "batch" centers on the mean of the step's whole batch and divides by its std + eps
    (REINFORCE++, arXiv 2501.03262).
    """
    if not isinstance(raw_rewards, torch.Tensor) or raw_rewards.ndim != 1:
        raise ValueError(
            "raw_rewards must be a 1-D tensor (B,), got "
            f"{getattr(raw_rewards, 'shape', type(raw_rewards))}"
        )
    if (
        isinstance(group_size, bool)
        or not isinstance(group_size, int)
        or group_size <= 0
    ):
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if raw_rewards.numel() == 0 or raw_rewards.numel() % group_size:
        raise ValueError(
            f"raw_rewards has {raw_rewards.numel()} entries, not a positive multiple "
            f"of group_size={group_size}"
        )
    if baseline not in RUN_BASELINES:
        raise ValueError(f"baseline must be one of {RUN_BASELINES}, got {baseline!r}")
    if advantage_normalizer not in RUN_NORMALIZERS:
        raise ValueError(f"advantage_normalizer must be one of {RUN_NORMALIZERS}, got "
                         f"{advantage_normalizer!r}")
    if advantage_normalizer == "std" and group_size == 1:
        raise ValueError(
            "advantage_normalizer='std' needs group_size >= 2: the unbiased std of "
            "one sample is undefined"
        )
    if baseline == "leave_one_out" and group_size == 1:
        raise ValueError("baseline='leave_one_out' needs group_size >= 2: one sample has "
                         "no others")

    rewards = (
        raw_rewards
        if raw_rewards.dtype in (torch.float32, torch.float64)
        else raw_rewards.float()
    )
    grouped = rewards.reshape(-1, group_size)  # (n_groups, G)
    group_mean = grouped.mean(dim=1, keepdim=True)  # (n_groups, 1)
    advantages = grouped - group_mean if baseline == "mean" else grouped
    if baseline == "leave_one_out":  # RLOO: the others' mean, (Σ_group r − r_i) / (G − 1)
        others = grouped.sum(dim=1, keepdim=True) - grouped  # (n_groups, G)
        advantages = grouped - others / (group_size - 1)
    if advantage_normalizer == "std":
        advantages = advantages / (
            grouped.std(dim=1, keepdim=True) + advantage_eps
        )  # unbiased (G - 1)
    elif advantage_normalizer == "mean":
        advantages = advantages / (group_mean + advantage_eps)
    elif advantage_normalizer == "batch":  # every rank's rows of the optimizer step
        advantages = whiten_over_batch(advantages, advantage_eps)
    advantages = advantages.reshape(-1)  # (B,)
    metadata = {
        "advantage_mean": advantages.mean().item(),
        "advantage_std": advantages.std().item() if advantages.numel() > 1 else 0.0,
    }
    return advantages, metadata
