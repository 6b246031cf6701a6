"""GRPO, one stage at a time: the course's reference solutions.

Pipeline order (one module per concept):
  tokenization → scoring → advantages → losses → aggregation → train_step
and the support modules models (tiny OLMo2 + tokenizer), metrics, distributed, tasks, rollout,
train, plotting.
Every graded function (listed in `course.registry`) is importable from here: `from course import grpo_train_step`.
"""

from course.advantages import compute_group_normalized_rewards, compute_rollout_rewards
from course.aggregation import (
    aggregate_loss_across_microbatch,
    calculate_loss_and_backward,
    masked_mean,
)
from course.losses import (
    GRPOLossConfig,
    compute_grpo_loss,
    compute_policy_gradient_loss,
    estimate_kl,
    truncated_importance_weights,
)
from course.metrics import LossStatistics, compare_logprobs
from course.registry import GRADED_FUNCTIONS, STAGES  # what is graded, by stage, in order
from course.scoring import compute_entropy, get_response_log_probs
from course.tokenization import tokenize_prompt_and_output
from course.train_step import grpo_train_step

__all__ = [
    "tokenize_prompt_and_output",
    "compute_entropy",
    "get_response_log_probs",
    "compute_rollout_rewards",
    "compute_group_normalized_rewards",
    "compute_policy_gradient_loss",
    "compute_grpo_loss",
    "estimate_kl",
    "truncated_importance_weights",
    "aggregate_loss_across_microbatch",
    "grpo_train_step",
    "GRADED_FUNCTIONS",
    "STAGES",
    "GRPOLossConfig",
    "LossStatistics",
    "calculate_loss_and_backward",
    "compare_logprobs",
    "masked_mean",
]
