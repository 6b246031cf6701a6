"""Grading inside Gradescope: `python -m autograder.gradescope run` (what `run_autograder` calls).

Gradescope's autograder specification (https://gradescope-autograders.readthedocs.io/en/latest/
specs/): the bundle is unpacked into `/autograder/source`, the student's upload lies in
`/autograder/submission`, and the grade is read from `/autograder/results/results.json` (`score`,
`output`, `tests`: name, score, max_score, status, output, visibility). `run` reads the root from
`--root` (default `$GRADESCOPE_ROOT` or /autograder), so the whole layout can be simulated anywhere
(tests/test_gradescope.py), and grades officially: `--official` (an isolated sandbox or no grade)
with fresh inputs. results.json carries only what the checks say.

The instructor builds the bundle and rehearses it with `python -m instructor.gradescope`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from autograder.options import (
    COPIES,
    COPIES_HELP,
    ISOLATIONS,
    MIN_MEMORY_MB,
    GradingOptions,
    Parser,
    seconds,
)
from course.paths import ROOT

# Gradescope's default container (https://gradescope-autograders.readthedocs.io/en/latest/
# troubleshooting/): a grading must fit in it, every process of it together
GRADESCOPE_MEMORY, GRADESCOPE_CPUS = "768 MB", "0.5"
# the grader's own processes in that container: 606-644 MiB at the peak of a whole grading, with a
# stage child's own memory (benchmarks/bench_gradescope.py); a submission gets the rest as its
# address-space bound, and beyond it the OOM killer takes a stage child (oom_score_adj 1000) first
GRADER_MB = 512
DEFAULT_MEMORY_MB = GradingOptions.memory_mb  # pytest autograder's own --memory-mb default
DEFAULT_TIME_LIMIT = GradingOptions.time_limit
# the grader's own process at half a CPU: one thread (more only cost stacks and malloc arenas; the
# expected values are computed on one thread anyway, `core.one_thread`) and two malloc arenas
LEAN = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
KILL_GRACE = 30.0  # seconds past the time limit before `run` stops a grader that overran it


def find_submission(folder: Path) -> Path:
    """What to grade in the upload: the folder itself when it holds notebooks or .py files at its
    top, else the one folder inside that does (students often upload a zipped folder)."""
    def has_code(path: Path) -> bool:
        return any(path.glob("*.ipynb")) or any(path.glob("*.py"))

    if has_code(folder):
        return folder
    inner = [p for p in sorted(folder.rglob("*"))
             if p.is_dir() and not p.is_symlink() and "__MACOSX" not in p.parts and has_code(p)]
    return inner[0] if len(inner) == 1 else folder


def container_memory_mb() -> int | None:
    """The memory limit of this container's cgroup in MiB (v1 or v2), None without one."""
    for name in ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"):
        try:
            value = Path(name).read_text().strip()
        except OSError:
            continue
        if value.isdigit() and int(value) < 2**50:  # v1 says "no limit" with a huge number
            return int(value) // 2**20
    return None


def submission_memory_mb(container_mb: int | None) -> int:
    """What `--memory-mb` a submission gets: inside a container's limit, about what the grader's
    own processes leave of it (GRADER_MB), so a hoard of address space fails with MemoryError in
    its own probe; one of real pages may reach the container's limit first, and then the OOM
    killer ends the stage child (the highest oom_score_adj), which costs that function its
    points and says memory. Without a limit, the grader's default."""
    if container_mb is None:
        return DEFAULT_MEMORY_MB
    return max(MIN_MEMORY_MB, container_mb - GRADER_MB)


def run(root: Path, allow_reference: bool = False, time_limit: float = DEFAULT_TIME_LIMIT,
        started: float | None = None, isolation: str = "auto", copies: str = "flag") -> int:
    """Grade `root`/submission officially into `root`/results/results.json (run_autograder).

    A grading that did not complete leaves NO results.json and exits 1. Gradescope then shows
    "the autograder failed" to the student and the instructor, never a number: a results.json
    always carries a score (the sum of its tests where it names none), and Gradescope shows that
    score as the grade, whatever its text says. So results.json is written once, whole (a rename),
    only by a grading that judged every check; an OOM kill, a time-out, a sandbox that would not
    start or a crash of the grader at any moment leaves nothing to mistake for a grade.
    `isolation`: the sandbox's tier, as `pytest autograder --isolation` takes it ("auto": the
    first that holds in the container). `copies`: `pytest autograder --copies` (flag or zero).
    """
    started = time.monotonic() if started is None else started
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    submission = find_submission(root / "submission")
    memory = submission_memory_mb(container_memory_mb())
    remaining = time_limit - (time.monotonic() - started)
    command = [sys.executable, "-m", "pytest", "autograder", "-q", "-p", "no:cacheprovider",
               "--submission", str(submission), "--official", "--results", str(results),
               "--time-limit", f"{max(remaining, 1.0):.1f}", "--memory-mb", str(memory)]
    command += ["--allow-reference"] if allow_reference else []
    command += ["--isolation", isolation, "--copies", copies]
    try:  # the grader keeps its own clock; this one stops a grader that no longer does
        done = subprocess.run(command, cwd=ROOT, timeout=max(remaining, 1.0) + KILL_GRACE,
                              env={**LEAN, **os.environ})
        why = f"the grader exited with code {done.returncode}"
    except subprocess.TimeoutExpired:
        why = f"the grader ran past --time-limit {time_limit:g} s and was stopped"
    if not results.exists():
        print(f"GRADING DID NOT COMPLETE: {why} and wrote no results.json, so Gradescope shows an "
              "autograder error, not a grade (the output above says why)", file=sys.stderr)
        return 1
    return 0


def _check_root(parser, root: Path) -> None:
    if not (root / "submission").is_dir():
        parser.error(f"--root {root}: no submission/ folder there (Gradescope's root holds "
                     "source/, submission/ and results/)")
    results = root / "results" / "results.json"
    if results.exists() or results.is_symlink():
        parser.error(f"--root {root}: {results} exists already (Gradescope grades each submission "
                     "in a fresh container): move it away to grade again")


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(prog="python -m autograder.gradescope",
                    description="Grade the submission in Gradescope's layout officially into "
                                "results/results.json (what run_autograder calls). The bundle is "
                                "built and rehearsed by `python -m instructor.gradescope`.")
    parser.add_argument("command", choices=("run",), help="run: grade (the only command)")
    parser.add_argument("--root", type=Path,
                        default=Path(os.environ.get("GRADESCOPE_ROOT", "/autograder")),
                        help="Gradescope's root folder (default $GRADESCOPE_ROOT or /autograder)")
    parser.add_argument("--time-limit", type=seconds, default=DEFAULT_TIME_LIMIT,
                        help="wall-clock seconds for the whole grading, from the start "
                             f"(default {DEFAULT_TIME_LIMIT:g})")
    parser.add_argument("--isolation", choices=ISOLATIONS, default="auto",
                        help="the sandbox's tier (auto: bubblewrap where the container allows "
                             "it, else Landlock and seccomp)")
    parser.add_argument("--allow-reference", action="store_true",
                        help="copies of the reference earn points: a check bundle's grading "
                             "(Gradescope's Test Autograder), never a student's")
    parser.add_argument("--copies", default="flag", choices=COPIES, help=COPIES_HELP)
    args = parser.parse_args(argv)
    _check_root(parser, args.root)
    return run(args.root, args.allow_reference, args.time_limit, started, args.isolation,
               args.copies)


if __name__ == "__main__":
    sys.exit(main())
