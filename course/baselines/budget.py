"""What a baseline run spends, and which settings it takes: torch-free, so that
`python -m course.baselines` refuses a bad flag before torch loads (`course.cli`).

The budget of a `TrainConfig` is the same for SFT, expert iteration and GRPO:
    optimizer steps   steps · updates_per_rollout
    examples          steps · prompts_per_step · group_size
where an example is a rollout the policy sampled (expert iteration, GRPO) or, for SFT, a correct
demonstration of a distinct training problem.
"""

from __future__ import annotations

from course.loop.matched_budget import refuse_grpo_only
from course.loop.train_config import ConfigError, TrainConfig, validate

METHODS = ("sft", "expert_iteration", "grpo")
# The fields SFT and expert iteration read; every other field shapes GRPO's loss alone.
SHARED_FIELDS = ("checkpoint", "steps", "prompts_per_step", "group_size", "lr", "weight_decay",
                 "updates_per_rollout", "gradient_accumulation_steps", "max_grad_norm",
                 "max_new_tokens", "temperature", "eval_problems", "eval_samples", "eval_every",
                 "seed", "device", "threads")


def budget(method: str, config: TrainConfig) -> dict[str, int]:
    """The run's `optimizer_steps` and `examples` (rollouts, or SFT's demonstrations)."""
    return {"optimizer_steps": config.steps * config.updates_per_rollout,
            "examples": config.steps * config.prompts_per_step * config.group_size}


def budget_line(method: str, config: TrainConfig) -> str:
    """The line a run prints before its first step: what it spends."""
    spent = budget(method, config)
    per_step = f"{config.prompts_per_step} prompts x {config.group_size}"
    examples = {"sft": f"{spent['examples']} demonstrations ({per_step} distinct problems per "
                       "step, each with its correct response)",
                "expert_iteration": f"the correct ones of {spent['examples']} rollouts ({per_step} "
                                    "samples per step)",
                "grpo": f"{spent['examples']} rollouts ({per_step} samples per step)"}[method]
    return (f"{method}: {spent['optimizer_steps']} optimizer steps on {examples}, lr {config.lr}, "
            f"seed {config.seed}")


def check(method: str, config: TrainConfig) -> None:
    """Raise ConfigError naming the first field that cannot run with `method` (`method` itself
    included, and a GRPO-only field set away from its default for SFT or expert iteration)."""
    if method not in METHODS:
        raise ConfigError("method", f"must be one of {METHODS}, got {method!r}")
    validate(config, 1)
    if config.task != "addition":
        raise ConfigError("task", "must be addition (its demonstrations are known), got "
                          f"{config.task!r}")
    if method != "grpo":
        refuse_grpo_only(config, SHARED_FIELDS, f"--method {method}")
