"""The grader's command-line options, checked before anything heavy is imported.

Every value a grader's flag takes is validated where it is parsed (`pytest autograder`'s options,
`autograder.gradescope`, `instructor.batch`): a bad value is a usage error that names the flag,
never a limit that silently means something else (`--time-limit 0` or `nan`), never an error
blamed on the submission (`--probe-timeout 0`: "timed out"; `--memory-mb -1`: "killed for
memory"). This module imports nothing of torch, so a usage error comes back at once.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit seed
MIN_MEMORY_MB = 64  # below this no stage child can even build the tiny model
ISOLATIONS = ("auto", "bubblewrap", "landlock")  # the sandbox's tiers (`trusted/isolation.py`)
DEVICES = ("cpu", "cuda", "auto")
COPIES = ("flag", "zero")  # what similarity to the reference does (`trusted/reference.py`)
COPIES_HELP = ("what similarity to the reference does: flag (default) shows the evidence to the "
               "instructor and costs no points; zero also zeroes a graded function above its "
               "threshold, calibrated on independent implementations")


@dataclass(frozen=True)
class GradingOptions:
    """How one grading runs: the one record `pytest autograder`, `autograder.api.grade`,
    `autograder.gradescope run` and `instructor.batch` hand the grader (checked by the flags'
    parsers above before it is made)."""

    device: str = "cpu"
    """Where the submission's tensors live: cpu, cuda, or auto (cuda where a GPU is visible)."""
    probe_timeout: float = 30.0
    """Seconds one call into the submission may take."""
    memory_mb: int = 6144
    """Address space (MiB) the submission may use beyond the grader's own libraries."""
    seed: int | None = None
    """Seed of the fresh inputs (None: drawn at random)."""
    official: bool = False
    """Refuse to grade unless the sandbox isolates the submission (and not from stored cases)."""
    time_limit: float = 1200.0
    """Wall-clock seconds for the whole grading, from its start, restarts and waits included."""
    allow_reference: bool = False
    """Pasted copies of the reference earn points: an instructor's check of the solutions."""
    stored_only: bool | None = None
    """Judge from the stored cases alone (None: when this is a student edition)."""
    isolation: str = "auto"
    """The sandbox's tier: the first that holds here (auto), bubblewrap or landlock."""
    copies: str = "flag"
    """Similarity to the reference: flagged with its evidence (flag), or also zeroed above the
    function's calibrated threshold (zero)."""


def number(text: str, kind=float, at_least: float | None = None,
           above: float | None = None, at_most: float | None = None):
    """`text` as a finite `kind` within the bounds; argparse.ArgumentTypeError otherwise."""
    try:
        value = kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if above is not None and not value > above:
        raise argparse.ArgumentTypeError(f"{text} must be more than {above:g}")
    if at_least is not None and value < at_least:
        raise argparse.ArgumentTypeError(f"{text} must be at least {at_least:g}")
    if at_most is not None and value > at_most:
        raise argparse.ArgumentTypeError(f"{text} must be at most {at_most:g}")
    return value


def seconds(text: str) -> float:
    """A positive, finite number of seconds (`--time-limit`, `--probe-timeout`)."""
    return number(text, float, above=0.0, at_most=7 * 24 * 3600)


def memory_mb(text: str) -> int:
    """MiB a submission may add to the grader's own libraries (`--memory-mb`)."""
    return number(text, int, at_least=MIN_MEMORY_MB, at_most=2**24)


def seed(text: str) -> int:
    return number(text, int, at_least=0, at_most=MAX_SEED)


def positive_int(text: str) -> int:
    return number(text, int, at_least=1)


# argparse's own `type=` callbacks name the function in their error; these names read well there
seconds.__name__ = "seconds"
memory_mb.__name__ = "MiB"


def cuda_problem() -> str | None:
    """Why `--device cuda` cannot grade here (None when it can). Without the NVIDIA device files
    it answers without importing torch; with them it asks torch, which may be a CPU-only build."""
    if not any(Path("/dev").glob("nvidia[0-9]*")) and sys.platform.startswith("linux"):
        return "--device cuda: this machine has no NVIDIA GPU (no /dev/nvidia*); use --device cpu"
    import torch

    if not torch.cuda.is_available():
        build = (
            "a CPU-only build"
            if torch.version.cuda is None
            else f"built for CUDA {torch.version.cuda}"
        )
        return (f"--device cuda: torch {torch.__version__} ({build}) sees no CUDA device; "
                "use --device cpu")
    return None


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage error is the one line that matters and a pointer to --help
    (argparse's own prints the whole usage first)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n(see `{self.prog} --help`)\n")



DEFAULT_OPTIONS = GradingOptions()  # frozen: one shared default is safe
