"""The command line `python -m course.baselines`: one run of SFT, expert iteration or GRPO on GRPO's
budget (`course.baselines.run`). The flags are those of `course.train` that all three read, checked
by name before torch loads (`course.cli`); GRPO's loss keeps `course.train`'s defaults.

    python -m course.baselines --method sft --seed 0 --out runs/sft
    python -m course.baselines --method expert_iteration --steps 50 --eval-every 10 --out runs/ei
"""

from __future__ import annotations

from pathlib import Path

from course.baselines.budget import METHODS, SHARED_FIELDS, check
from course.cli import INTERRUPTED, Parser, add_config_arguments
from course.loop.matched_budget import exit_with, grpo_only_fields, quiet_transformers, result_text
from course.loop.train_config import ConfigError, TrainConfig, flag_types
from course.train import out_problem


def main(argv: list[str] | None = None) -> int:
    """`python -m course.baselines`: check every flag, then import torch and train."""
    parser = Parser(prog="python -m course.baselines",
                    description="SFT, expert iteration or GRPO on GRPO's budget.")
    parser.add_argument("--method", required=True, choices=METHODS,
                        help="sft (correct demonstrations), expert_iteration (the policy's correct "
                             "samples) or grpo (course.train's trainer)")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for metrics.jsonl, summary.json and policy.pt")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run an --out folder already holds")
    add_config_arguments(parser, TrainConfig, types=flag_types(),
                         exclude=grpo_only_fields(SHARED_FIELDS))
    args = vars(parser.parse_args(argv))
    method, out, overwrite = args.pop("method"), args.pop("out"), args.pop("overwrite")
    if problem := out_problem(out, overwrite):
        parser.error(f"argument --out: {problem}")
    config = TrainConfig(**args)
    try:
        check(method, config)
    except ConfigError as error:
        parser.error(f"argument --{error.field.replace('_', '-')}: {error.message}")

    from course.baselines.run import run  # torch from here on

    quiet_transformers()
    summary = run(method, config, out)
    if summary.get("interrupted"):
        return INTERRUPTED
    print(result_text(summary["method"], "examples", summary, out,
                      "metrics.jsonl, summary.json, policy.pt"))
    return 0


if __name__ == "__main__":
    exit_with(main)
