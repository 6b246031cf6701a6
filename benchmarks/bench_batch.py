"""How long grading a class takes: `python -m instructor.batch` beside a loop of single gradings.

    python benchmarks/bench_batch.py [--students 20] [--loop 4]

Builds a class in a temporary folder: half the students hand in an independent, correct
implementation (tests/autograder_cases/_impl.py, which earns full marks), the other half one of the
buggy ones (the `mutant_*` cases, each losing some points), every one a single .py file as a
student would hand in. Then it times, on the same class:

- `python -m instructor.batch DIR --jobs 2` (the issue's bound: at most 6 s per submission on 2 cores),
- `python -m instructor.batch DIR --jobs 1`,
- what a grader would otherwise run: `pytest autograder --submission S --official` once per student
  (timed on the first `--loop` students, to keep the benchmark short).

Every grading is official (bubblewrap sandbox, fresh inputs). Prints a table and the machine.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "autograder_cases"


def make_class(folder: Path, students: int) -> list[Path]:
    """`students` .py submissions in `folder`: correct and buggy, alternating; each self-contained."""
    implementation = (CASES / "_impl.py").read_text(encoding="utf-8")
    mutants = sorted(CASES.glob("mutant_*.py"))
    entries = []
    for index in range(students):
        if index % 2 == 0:
            body = "globals().update(build())\n"
        else:
            mutant = mutants[(index // 2) % len(mutants)].read_text(encoding="utf-8")
            body = mutant.replace("from _impl import build\n", "")
        entry = folder / f"student{index:03d}.py"
        entry.write_text(implementation + "\n\n" + body, encoding="utf-8")
        entries.append(entry)
    return entries


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):  # 1: some checks failed, as they should for the buggy half
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=20, help="class size (default 20)")
    parser.add_argument("--loop", type=int, default=4,
                        help="students graded one by one with pytest autograder (default 4)")
    args = parser.parse_args()
    if args.students < 2 or not 1 <= args.loop <= args.students:
        parser.error("--students must be >= 2 and --loop between 1 and --students")
    import torch

    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, python {platform.python_version()}, "
          f"torch {torch.__version__}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_batch_") as tmp:
        klass = Path(tmp) / "class"
        klass.mkdir()
        entries = make_class(klass, args.students)
        for jobs in (2, 1):
            grades = Path(tmp) / f"grades{jobs}.csv"
            elapsed = timed([sys.executable, "-m", "instructor.batch", str(klass), "--jobs", str(jobs),
                             "--csv", str(grades)])
            with grades.open() as handle:
                scores = [float(row["score"]) for row in csv.DictReader(handle)]
            full = sum(score == max(scores) for score in scores)
            rows.append((f"instructor.batch --jobs {jobs}", args.students, elapsed, f"{full} full marks"))
        started = time.perf_counter()
        for entry in entries[:args.loop]:
            timed([sys.executable, "-m", "pytest", "autograder", "--submission", str(entry), "--official",
                   "-q", "-p", "no:cacheprovider", "--results", str(Path(tmp) / f"{entry.stem}.json")])
        rows.append(("pytest autograder --official, one by one", args.loop,
                     time.perf_counter() - started, ""))
    print(f"{'method':<44}{'students':>9}{'wall s':>9}{'s/student':>11}  note")
    for method, count, elapsed, note in rows:
        print(f"{method:<44}{count:>9}{elapsed:>9.1f}{elapsed / count:>11.2f}  {note}")


if __name__ == "__main__":
    main()
