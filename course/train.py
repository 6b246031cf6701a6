"""The command line `python -m course.train`: its flags are `TrainConfig`'s fields, checked before
torch loads (`course.cli`); then the loop (`course.loop.train`) runs with the reference's stages
or, with `--notebooks` (and in a student edition, by default), the learner's own.

    python -m course.train --out runs/grpo                      # one process
    torchrun --nproc_per_node 2 -m course.train --out runs/dp   # data parallel (gloo on CPU)
"""

from __future__ import annotations

import os
from pathlib import Path

from course.cli import INTERRUPTED, Parser, add_config_arguments, unwritable
from course.loop.progress import bars_drawn
from course.loop.train_config import (
    CHOICES,
    RUN_FILES,
    ConfigError,
    TrainConfig,
    flag_types,
    temperature_problem,
    validate,
)
from course.paths import EDITION_MARKER, ROOT
from course.registry import STAGE_NAMED, STAGE_OF


def stages_of(names: tuple[str, ...]) -> str:
    """"3_advantages, 4_losses": the stages of the graded functions `names`, in course order."""
    return ", ".join(key for key in STAGE_NAMED if key in {STAGE_OF[name] for name in names})


def edition_notebooks(missing: tuple[str, ...], root: Path = ROOT) -> Path:
    """The notebooks to train with when the reference of the graded functions `missing` is not
    here and no --notebooks was given: a student edition's own `notebooks/`. Raises ValueError
    naming --notebooks where `root` is no edition or holds no notebooks."""
    folder = root / "notebooks"
    if not (root / EDITION_MARKER).is_file() or not any(folder.glob("*.ipynb")):
        raise ValueError(f"the reference of stage {stages_of(missing)} is not here, and {folder} "
                         "holds no notebooks: give --notebooks DIR, the folder of your notebooks")
    return folder


def out_problem(out: Path, overwrite: bool) -> str | None:
    """Why a run cannot be written to `out` (None when it can): not a writable folder, or one that
    holds a run already and no --overwrite."""
    if problem := unwritable(out):
        return problem
    held = [name for name in RUN_FILES if (out / name).exists()]
    if held and not overwrite:
        return (f"{out} holds a run already ({', '.join(held)}): pass --overwrite to replace it, "
                "or choose another folder")
    return None


def main(argv: list[str] | None = None) -> int:
    """`python -m course.train`: check every flag, then import torch and train."""
    parser = Parser(
        prog="python -m course.train", description="End-to-end GRPO: the course's stages, "
        "assembled into a loop that learns on a laptop CPU.",
        epilog="Data parallel: torchrun --nproc_per_node N -m course.train [options] (gloo on "
               "CPU).")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for metrics.jsonl, summary.json, training_curves.png and "
                             "policy.pt "
                             "(default: write nothing, print the summary)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run an --out folder already holds")
    parser.add_argument("--notebooks", type=Path, default=None, metavar="DIR",
                        help="train with your own stages, read from the notebooks in DIR (stages "
                             "not written yet use the reference where it is available)")
    add_config_arguments(parser, TrainConfig, choices=CHOICES, types=flag_types())
    args = vars(parser.parse_args(argv))
    out, notebooks, overwrite = args.pop("out"), args.pop("notebooks"), args.pop("overwrite")
    if out is not None and (problem := out_problem(out, overwrite)):
        parser.error(f"argument --out: {problem}")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    try:  # what no single flag decides: values that must fit together, and the world size
        validate(TrainConfig(**args), world_size)
    except ConfigError as error:
        parser.error(f"argument --{error.field.replace('_', '-')}: {error.message}")

    from course.loop import (
        train as loop,  # torch from here on; loaded before the learner's stand in
    )
    from course.submissions.implementations import (
        StageNotWritten,
        load_implementations,
        missing_references,
    )

    if not bars_drawn():  # a log: no "Loading weights" bar of transformers' either
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()

    implementations = None
    missing = missing_references()
    if notebooks is None and missing:  # a student edition: train with the learner's stages
        try:
            notebooks = edition_notebooks(missing)
        except ValueError as error:
            parser.error(f"argument --notebooks: {error}")
        print(f"this student edition has not revealed stage {stages_of(missing)}: training "
              f"with your notebooks in {notebooks} (--notebooks DIR for another folder)")
    if notebooks is not None:
        try:
            implementations = load_implementations(notebooks)  # stands in for the loop's stubs too
        except (FileNotFoundError, StageNotWritten) as error:
            parser.error(f"argument --notebooks: {error}")
        print(implementations.table())
        if problem := temperature_problem(implementations["grpo_train_step"]):
            parser.error(f"argument --temperature: {problem}")
    try:
        summary = loop.run_distributed(TrainConfig(**args), out, implementations, world_size)
    except ConfigError as error:  # what only the loaded model or task decides
        parser.error(f"argument --{error.field.replace('_', '-')}: {error.message}")
    if summary:
        print(loop.result_text(summary, out))
    return INTERRUPTED if summary.get("interrupted") else 0


if __name__ == "__main__":  # the flags are checked before torch loads (course.cli)
    import sys

    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # Ctrl-C while loading or evaluating; one in a step is the loop's
        print("interrupted (Ctrl-C) outside the training steps: no summary written",
              file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None
