"""Stage 3 — rewards and group-normalized advantages.

GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300, §4.1.2) samples G responses per prompt and
scores each against its own group, so no value network is needed:
  A_i = (r_i − mean(r_group)) / (std(r_group) + ε)          baseline="mean", normalizer="std"
Variants, all on the same (n_groups, G) layout:
  Dr. GRPO  (Liu et al. 2025, arXiv 2503.20783)  no std:        A_i = r_i − mean      normalizer="none"
  MaxRL                                           divide by mean: A_i = (r_i − mean)/(mean + ε)
  RFT / rejection-sampling fine-tuning            no baseline:   A_i = r_i             baseline="none"
std is the unbiased sample std (torch.std's default, n − 1), and ε is added outside the square root.
A group whose G rewards are equal gets A = 0 everywhere: it carries no learning signal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

BASELINES = ("mean", "none")
NORMALIZERS = ("std", "mean", "none")


def compute_rollout_rewards(
    reward_fn: Callable[[str, str], dict[str, float]],
    rollout_responses: Sequence[str],
    repeated_ground_truths: Sequence[str],
) -> tuple[torch.Tensor, dict[str, float]]:
    """Score B responses with `reward_fn(response, ground_truth)`.

    Returns:
        rewards: (B,) float32, the `reward` entry of each result.
        metadata: `reward_mean`, `format_reward_mean`, `answer_reward_mean` (floats).
    """
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError(
            f"rollout_responses and repeated_ground_truths must have the same length, got "
            f"{len(rollout_responses)} and {len(repeated_ground_truths)}"
        )
    if len(rollout_responses) == 0:
        raise ValueError("rollout_responses must not be empty")
    keys = ("reward", "format_reward", "answer_reward")
    table = []
    for response, truth in zip(rollout_responses, repeated_ground_truths):
        result = reward_fn(response, truth)
        missing = [k for k in keys if k not in result]
        if missing:
            raise ValueError(f"reward_fn must return a dict with {keys}; missing {missing}")
        table.append([float(result[k]) for k in keys])
    values = torch.tensor(table, dtype=torch.float32)  # (B, 3)
    means = values.mean(dim=0)
    metadata = {f"{k}_mean": means[i].item() for i, k in enumerate(keys)}
    return values[:, 0].clone(), metadata


def compute_group_normalized_rewards(
    raw_rewards: torch.Tensor,
    group_size: int,
    baseline: str = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: str = "std",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Group-relative advantages for B = n_groups · G rewards laid out in consecutive groups.

    Args:
        raw_rewards: (B,) rewards; rows [k·G, (k+1)·G) are the responses to prompt k.
        group_size: G.
        baseline: "mean" subtracts the group mean; "none" keeps the raw reward (RFT).
        advantage_eps: ε added to the denominator (outside the square root).
        advantage_normalizer: "std" (GRPO), "mean" (MaxRL) or "none" (Dr. GRPO).

    Returns:
        advantages: (B,) in the dtype of `raw_rewards` (float32 for integer/half input).
        metadata: `advantage_mean`, `advantage_std` (floats).
    """
    if not isinstance(raw_rewards, torch.Tensor) or raw_rewards.ndim != 1:
        shape = tuple(raw_rewards.shape) if isinstance(raw_rewards, torch.Tensor) else type(raw_rewards)
        raise ValueError(f"raw_rewards must be a 1-D tensor (B,), got {shape}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if raw_rewards.numel() == 0 or raw_rewards.numel() % group_size != 0:
        raise ValueError(
            f"raw_rewards has {raw_rewards.numel()} entries, not a positive multiple of "
            f"group_size={group_size}"
        )
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    if advantage_normalizer not in NORMALIZERS:
        raise ValueError(f"advantage_normalizer must be one of {NORMALIZERS}, got {advantage_normalizer!r}")

    rewards = raw_rewards if raw_rewards.dtype in (torch.float32, torch.float64) else raw_rewards.float()
    grouped = rewards.reshape(-1, group_size)  # (n_groups, G)
    mean = grouped.mean(dim=1, keepdim=True)  # (n_groups, 1)
    advantages = grouped - mean if baseline == "mean" else grouped
    if advantage_normalizer == "std":
        if group_size == 1:
            raise ValueError("advantage_normalizer='std' needs group_size >= 2 (unbiased std of 1 sample)")
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + advantage_eps)
    elif advantage_normalizer == "mean":
        advantages = advantages / (mean + advantage_eps)
    advantages = advantages.reshape(-1)  # (B,)
    metadata = {
        "advantage_mean": advantages.mean().item(),
        "advantage_std": advantages.std().item() if advantages.numel() > 1 else 0.0,
    }
    return advantages, metadata
