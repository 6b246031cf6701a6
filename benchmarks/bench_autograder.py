"""How long `pytest autograder --submission course` takes, end to end and per stage.

    python benchmarks/bench_autograder.py [--repeats 3] [--submission S [--allow-reference]] [--whole]

Prints a table of wall times (the real CLI, in a subprocess, as a grader would run it) and the
machine it ran on. Target: under 60 s on a 2-core CPU, aim 20 s. `--submission`: what is graded
(`course`, the reference, by default; `--allow-reference` for another that holds it, such as
`solutions`); `--whole`: the whole grading only, not each stage's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SELECTIONS = (None, "tokenize", "compute_entropy or get_response_log_probs",
              "compute_rollout_rewards or compute_group_normalized_rewards",
              "compute_policy_gradient_loss",
              "estimate_kl or truncated_importance_weights or compute_grpo_loss",
              "aggregate_loss", "grpo_train_step")


def grade_once(selection: str | None, submission: str = "course",
               allow_reference: bool = False) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "results.json"
        command = [sys.executable, "-m", "pytest", "autograder", "--submission", submission,
                   "--results", str(results), "-q", "-p", "no:cacheprovider", "--seed", "1"]
        if allow_reference:
            command.append("--allow-reference")
        if selection:
            command += ["-k", selection]
        started = time.perf_counter()
        subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - started
        document = json.loads(results.read_text())
    return elapsed, document["score"], sum(t["max_score"] for t in document["tests"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--submission", default="course")
    parser.add_argument("--allow-reference", action="store_true")
    parser.add_argument("--whole", action="store_true")
    args = parser.parse_args()
    import torch

    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, python {platform.python_version()}, torch {torch.__version__}")
    print(f"submission: {args.submission}")
    print(f"{'selection':<34}{'median s':>10}{'min s':>8}{'score':>12}")
    for selection in (None,) if args.whole else SELECTIONS:
        times, score, maximum = [], 0.0, 0.0
        for _ in range(args.repeats):
            elapsed, score, maximum = grade_once(selection, args.submission, args.allow_reference)
            times.append(elapsed)
        label = (selection or "all checks")[:33]
        print(f"{label:<34}{statistics.median(times):>10.1f}{min(times):>8.1f}{f'{score:g}/{maximum:g}':>12}")


if __name__ == "__main__":
    main()
