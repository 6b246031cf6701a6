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

Two ungraded options, which `python -m course.train` trains with (a learner's stage 3 need not take
them: `course.loop.step_arguments.advantage_option_problem`):
  baseline="leave_one_out"      A_i = r_i − (1/(G−1)) Σ_{j≠i, j in i's group} r_j
      RLOO: Kool, van Hoof and Welling 2019 ("Buy 4 REINFORCE samples, get a baseline for
      free!"); Ahmadian et al. 2024, arXiv 2402.14740. The baseline leaves r_i out, so it is
      independent of sample i and the estimator stays unbiased; algebraically
      A_i = G/(G−1) · (r_i − mean_group), Dr. GRPO's advantage times a constant. G ≥ 2.
  advantage_normalizer="batch"  A_i = (x_i − mean_batch(x)) / (std_batch(x) + ε)
      REINFORCE++: Hu 2025, arXiv 2501.03262, with x = r (baseline="none"): no group baseline;
      the whole step's mean and unbiased (n − 1) std, ε outside the square root as above.
      With baseline="mean", x = r − mean_group, and the batch std divides after (centering
      changes nothing then): REINFORCE++-baseline, OpenRLHF's
      `advantage_estimator="reinforce_baseline"` (openrlhf/trainer/ppo_utils/experience_maker.py).
      With outcome rewards and no KL in the reward, every token's return is its sequence's
      reward, so one advantage per sequence is REINFORCE++'s.
Worked by hand, G = 4, the groups (1, 0, 0, 1) and (1, 0, 0, 0):
  RLOO                   (2/3, −2/3, −2/3, 2/3), (1, −1/3, −1/3, −1/3)
  REINFORCE++            batch mean 3/8, std √(15/56) = 0.5175: a 1 gets 1.2076, a 0 −0.7246
  REINFORCE++-baseline   (0.5, −0.5, −0.5, 0.5), (0.75, −0.25, −0.25, −0.25) over std 1/2:
                         (1, −1, −1, 1), (1.5, −0.5, −0.5, −0.5)
What tells them apart: a group whose G rewards are equal. RLOO and GRPO give it A = 0 (no
signal); REINFORCE++ without the group baseline pushes an all-correct group up and an all-wrong
one down, as the batch's other groups set the baseline. "The step's whole batch" is exact: under
DDP every rank's rows (one all-reduce of n, Σx and Σx², as `course.train_step` sums its counts
over ranks), and stage 3 runs once per optimizer step, before the micro-batches, so the
accumulation split cannot change it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from course.distributed import is_distributed
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
        raise ValueError(
            "baseline='leave_one_out' needs group_size >= 2: one sample has no others"
        )

    rewards = (
        raw_rewards
        if raw_rewards.dtype in (torch.float32, torch.float64)
        else raw_rewards.float()
    )
    grouped = rewards.reshape(-1, group_size)  # (n_groups, G)
    group_mean = grouped.mean(dim=1, keepdim=True)  # (n_groups, 1)
    advantages = grouped - group_mean if baseline == "mean" else grouped
    if baseline == "leave_one_out":  # RLOO: the others' mean (Σ_group r − r_i)/(G − 1)
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


def whiten_over_batch(advantages: torch.Tensor, advantage_eps: float) -> torch.Tensor:
    """Values (any shape; (n_groups, G) in stage 3) centered on the mean of the
    optimizer step's batch, over every data-parallel rank, and divided by its unbiased
    std + advantage_eps (REINFORCE++, arXiv 2501.03262)."""
    values = advantages.to(torch.float64)  # the sums in float64, as the step's counts
    count = torch.tensor(float(values.numel()), dtype=torch.float64)
    sums = torch.stack([count, values.sum(), values.square().sum()])  # n, Σx, Σx²
    if is_distributed():
        dist.all_reduce(sums)
    count, total, squares = sums.unbind()
    if count < 2:
        raise ValueError(
            "advantage_normalizer='batch' needs at least 2 rewards in the step's "
            f"batch (raw_rewards over every rank), got {int(count)}: the std of one "
            "reward is undefined"
        )
    mean = total / count
    variance = (squares - count * mean**2) / (count - 1)  # unbiased (n − 1)
    std = variance.clamp(min=0.0).sqrt()  # rounding can leave −1e-17
    return ((values - mean) / (std + advantage_eps)).to(advantages.dtype)
