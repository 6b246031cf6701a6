"""What the commands that train on GRPO's budget share (`python -m course.baselines`,
`python -m course.critic`): the flags they leave to GRPO, the check that those stay at their
defaults, the lines that report a run, and the exit on Ctrl-C. Torch-free: the flags are checked
before torch loads."""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection
from dataclasses import fields
from pathlib import Path

from course.cli import INTERRUPTED
from course.loop.progress import bars_drawn
from course.loop.train_config import ConfigError, TrainConfig


def grpo_only_fields(shared: Collection[str]) -> list[str]:
    """The fields of `TrainConfig` outside `shared`: what only GRPO's loss reads."""
    return [field.name for field in fields(TrainConfig) if field.name not in shared]


def refuse_grpo_only(config: TrainConfig, shared: Collection[str], who: str) -> None:
    """Raise ConfigError naming the first GRPO-only field `config` moved from its default;
    `who` is the method as the message names it (e.g. "PPO", "--method sft")."""
    default = TrainConfig()
    for name in grpo_only_fields(shared):
        if getattr(config, name) != getattr(default, name):
            raise ConfigError(name, f"shapes GRPO's loss only; {who} leaves it at "
                                    f"{getattr(default, name)!r}")


def result_text(method: str, unit: str, summary: dict, out: Path, files: str) -> str:
    """A run's result as the commands print it: held-out accuracy before and after, and where;
    `unit` names what the budget counts (examples, rollouts), `files` what `out` holds."""
    rows = [("sampled at τ = 1", "accuracy"), ("greedy", "greedy_accuracy")]
    lines = [f"{method}: {summary['optimizer_steps']} optimizer steps, {summary['examples']} "
             f"{unit}, {summary['wall_seconds']:.0f} s"]
    lines += [f"  held-out accuracy, {label:<17} {summary[key + '_before']:.3f}  →  "
              f"{summary[key + '_after']:.3f}" for label, key in rows]
    lines.append(f"wrote {out}/ ({files})")
    return "\n".join(lines)


def quiet_transformers() -> None:
    """In a log (no bars drawn), no "Loading weights" bar of transformers' either."""
    if not bars_drawn():
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def exit_with(main: Callable[[], int]) -> None:
    """Run a command's `main` as the program: its exit code, or INTERRUPTED on Ctrl-C."""
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C): no summary.json written", file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None
