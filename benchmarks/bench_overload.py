"""Grading honest work on an overloaded machine: a class beside 16 busy loops on 2 cores.

    python benchmarks/bench_overload.py [--students 8] [--busy 16] [--tier2 2]

Starts `--busy` busy loops (each ends by itself after `--busy-seconds`, and all are killed at the
end, an interrupt or SIGTERM included),
then grades, one after the other:
- a class of `--students` honest single-file submissions (`bench_batch.make_class`'s correct
  half: tests/autograder_cases/_impl.py, full marks) with `python -m instructor.batch --jobs 2`
  (the first tier that holds here);
- `--tier2` official gradings of the reference at once in tier 2 (`isolation="landlock"`), every
  check, as Gradescope's container gets them.
It prints, for each, the wall time, how many gradings completed with full marks, how many came out
incomplete, and how often a sandbox stopped answering and was started again (the grader's stderr:
"the sandbox stopped during"). Fair means: every honest grading completes with full marks.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_batch import make_class

ROOT = Path(__file__).resolve().parent.parent
BUSY = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def grade_class(students: int) -> tuple[float, str]:
    with tempfile.TemporaryDirectory(prefix="bench_overload_") as tmp:
        klass = Path(tmp) / "class"
        klass.mkdir()
        for index, entry in enumerate(make_class(klass, 2 * students)):
            if index % 2:  # make_class alternates correct and buggy: keep the correct ones
                entry.unlink()
        grades = Path(tmp) / "grades.csv"
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "instructor.batch", str(klass), "--jobs", "2",
                               "--csv", str(grades)], cwd=ROOT, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        with grades.open() as handle:
            rows = list(csv.DictReader(handle))
    incomplete = sum(row["score"] == "incomplete" for row in rows)
    full = sum(row["score"] != "incomplete" and float(row["score"]) == float(row["max_score"]) > 0
               for row in rows)
    restarts = done.stderr.count("the sandbox stopped during")
    return elapsed, (f"{len(rows)} graded, {full} full marks, {incomplete} incomplete, "
                     f"{restarts} sandbox restarts, exit {done.returncode}")


def grade_tier2(count: int) -> tuple[float, str]:
    from autograder.api import grade

    log = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stderr(log), ThreadPoolExecutor(max_workers=count) as pool:
        graded = list(pool.map(lambda _: grade("course", official=True, isolation="landlock"),
                               range(count)))
    elapsed = time.perf_counter() - started
    full = sum(g["score"] == g["max_score"] > 0 and not g["incomplete"] for g in graded)
    incomplete = sum(bool(g["incomplete"]) for g in graded)
    restarts = log.getvalue().count("the sandbox stopped during")
    return elapsed, (f"{count} graded, {full} full marks, {incomplete} incomplete, "
                     f"{restarts} sandbox restarts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=8, help="honest students (default 8)")
    parser.add_argument("--busy", type=int, default=16, help="busy loops (default 16)")
    parser.add_argument("--tier2", type=int, default=2, help="tier-2 gradings at once (default 2)")
    parser.add_argument("--busy-seconds", type=float, default=1200.0,
                        help="the longest a busy loop lives (default 1200)")
    args = parser.parse_args()
    import torch

    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} before the loops, python "
          f"{platform.python_version()}, torch {torch.__version__}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that the loops are killed below
    busy = [subprocess.Popen([sys.executable, "-c", BUSY, str(args.busy_seconds)])
            for _ in range(args.busy)]
    try:
        rows = [(f"instructor.batch --jobs 2, {args.busy} busy loops", *grade_class(args.students))]
        if args.tier2:
            rows.append((f"{args.tier2} tier-2 gradings at once, {args.busy} busy loops",
                         *grade_tier2(args.tier2)))
        load = os.getloadavg()[0]
    finally:
        for process in busy:
            process.kill()
            process.wait()
    print(f"load average at the end: {load:.1f}")
    print(f"{'method':<48}{'wall s':>9}  result")
    for method, elapsed, note in rows:
        print(f"{method:<48}{elapsed:>9.1f}  {note}")


if __name__ == "__main__":
    main()
