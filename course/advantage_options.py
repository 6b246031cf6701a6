"""Stage 3's two ungraded options, which `python -m course.train` trains with: RLOO's
leave-one-out baseline and REINFORCE++'s normalization over the optimizer step's whole batch.

On B = n · G rewards r (B,) in consecutive groups of G (the layout of `course.advantages`):
  baseline="leave_one_out"      A_i = r_i − (1/(G−1)) Σ_{j≠i, j in i's group} r_j
      RLOO: Kool, van Hoof and Welling 2019 ("Buy 4 REINFORCE samples, get a baseline for
      free!"); Ahmadian et al. 2024, arXiv 2402.14740. The baseline leaves r_i out, so it is
      independent of sample i and the estimator stays unbiased; algebraically
      A_i = G/(G−1) · (r_i − mean_group), Dr. GRPO's advantage times a constant. G ≥ 2.
  advantage_normalizer="batch"  A_i = (x_i − mean_batch(x)) / (std_batch(x) + ε)
      REINFORCE++: Hu 2025, arXiv 2501.03262, with x = r (baseline="none"): no group baseline;
      the whole step's mean and unbiased (n − 1) std, ε outside the square root as in stage 3.
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
one down, as the batch's other groups set the baseline.

"The step's whole batch" is exact: under DDP every rank's rows (one all-reduce of n, Σx and Σx²,
as `course.train_step` sums its counts over ranks), and stage 3 runs once per optimizer step,
before the micro-batches, so the accumulation split cannot change it. The options are ungraded:
a learner's stage 3 need not take them (`course.loop.step_arguments.advantage_option_problem`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from course.distributed import is_distributed


def whiten_over_batch(advantages: torch.Tensor, advantage_eps: float) -> torch.Tensor:
    """Values (any shape; (n_groups, G) in stage 3) centered on the mean of the optimizer step's
    batch, over every data-parallel rank, and divided by its unbiased std + advantage_eps
    (REINFORCE++, arXiv 2501.03262)."""
    values = advantages.to(torch.float64)  # the sums in float64, as the train step's counts
    sums = torch.stack([torch.tensor(float(values.numel()), dtype=torch.float64),
                        values.sum(), values.square().sum()])  # (3,): n, Σx, Σx²
    if is_distributed():
        dist.all_reduce(sums)
    count, total, squares = sums.unbind()
    if count < 2:
        raise ValueError("advantage_normalizer='batch' needs at least 2 rewards in the step's "
                         f"batch (raw_rewards over every rank), got {int(count)}: the std of one "
                         "reward is undefined")
    mean = total / count
    variance = ((squares - count * mean**2) / (count - 1)).clamp(min=0.0)  # unbiased (n − 1)
    return ((values - mean) / (variance.sqrt() + advantage_eps)).to(advantages.dtype)
