"""The command line `python -m course.critic`: one PPO + GAE run on GRPO's budget
(`course.critic.run`). The flags are those of `course.train` that PPO reads and the critic's own,
checked by name before torch loads (`course.cli`).

    python -m course.critic --seed 0 --out runs/ppo
    python -m course.critic --steps 50 --eval-every 10 --lam 1 --out runs/ppo_lam1
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from course.cli import Parser, add_config_arguments
from course.critic.config import SHARED_FIELDS, CriticConfig, check, flag_types
from course.loop.matched_budget import exit_with, grpo_only_fields, quiet_transformers, result_text
from course.loop.train_config import ConfigError, TrainConfig
from course.loop.train_config import flag_types as train_flag_types
from course.train import out_problem


def main(argv: list[str] | None = None) -> int:
    """`python -m course.critic`: check every flag, then import torch and train."""
    parser = Parser(prog="python -m course.critic",
                    description="PPO with a value head and GAE, on GRPO's budget.")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for metrics.jsonl, summary.json, policy.pt, value_head.pt")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run an --out folder already holds")
    add_config_arguments(parser, TrainConfig, types=train_flag_types(),
                         exclude=grpo_only_fields(SHARED_FIELDS))
    add_config_arguments(parser, CriticConfig, types=flag_types())
    args = vars(parser.parse_args(argv))
    out, overwrite = args.pop("out"), args.pop("overwrite")
    if problem := out_problem(out, overwrite):
        parser.error(f"argument --out: {problem}")
    critic = CriticConfig(**{f.name: args.pop(f.name) for f in fields(CriticConfig)})
    config = TrainConfig(**args)
    try:
        check(config, critic)
    except ConfigError as error:
        parser.error(f"argument --{error.field.replace('_', '-')}: {error.message}")

    from course.critic.run import run  # torch from here on

    quiet_transformers()
    print(result_text("ppo", "rollouts", run(config, critic, out), out,
                      "metrics.jsonl, summary.json, policy.pt, value_head.pt"))
    return 0


if __name__ == "__main__":
    exit_with(main)
