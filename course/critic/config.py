"""What a PPO + GAE run depends on, torch-free, so that `python -m course.critic` refuses a bad
flag before torch loads (`course.cli`).

The run takes GRPO's `TrainConfig` fields that PPO reads (`SHARED_FIELDS`: the budget, the
optimizer, the sampling and the held-out test are GRPO's) and the critic's own (`CriticConfig`).
The budget is GRPO's: `steps` rollout batches of `prompts_per_step` x `group_size` rollouts, each
followed by `updates_per_rollout` optimizer steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.cli import bounded_types, out_of_range
from course.loop.matched_budget import refuse_grpo_only
from course.loop.train_config import ConfigError, TrainConfig, validate

# The TrainConfig fields a PPO run reads; every other one shapes GRPO's loss alone.
SHARED_FIELDS = ("checkpoint", "steps", "prompts_per_step", "group_size", "lr", "weight_decay",
                 "cliprange", "updates_per_rollout", "gradient_accumulation_steps",
                 "max_grad_norm", "max_new_tokens", "temperature", "eval_problems", "eval_samples",
                 "eval_every", "seed", "device", "threads")


@dataclass
class CriticConfig:
    """The critic's settings (`course.critic.gae`, `course.critic.value`)."""

    gamma: float = 1.0
    """γ of GAE: the discount per token (1: a reward at the end counts in full at every token)."""
    lam: float = 0.95
    """λ of GAE: 1 is the Monte Carlo return minus V (unbiased, noisy), 0 the one-step TD error."""
    vf_coef: float = 0.1
    """c_v, the value loss's weight; its gradient trains the shared trunk too."""
    value_clip: float = 0.2
    """ε_v: V may move at most this far from the rollout's V_old before its loss stops pushing."""
    kl_coef: float = 0.0
    """β of the per-token KL penalty −β·(log π_old − log π_ref) in the rewards (0: none)."""


# (lowest value, whether it is allowed, highest value)
BOUNDS = {"gamma": (0, True, 1), "lam": (0, True, 1), "vf_coef": (0, True),
          "value_clip": (0, False), "kl_coef": (0, True)}


def flag_types() -> dict:
    """argparse `type=` functions that check each CriticConfig flag as it is parsed."""
    return bounded_types(CriticConfig, BOUNDS)


def check(config: TrainConfig, critic: CriticConfig) -> None:
    """Raise ConfigError naming the first field that cannot run: GRPO's checks, the addition task,
    each critic setting in its bounds, and no GRPO-only field moved from its default."""
    validate(config, 1)
    if config.task != "addition":
        raise ConfigError("task", f"must be addition, got {config.task!r}")
    for name, bound in BOUNDS.items():
        if problem := out_of_range(getattr(critic, name), *bound):
            raise ConfigError(name, problem)
    refuse_grpo_only(config, SHARED_FIELDS, "PPO")
