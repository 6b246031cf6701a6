"""Notebook 14's study: the per-rollout costs its estimate is made of, and the solution's study.

    python benchmarks/bench_study.py             # COST of course.lab.study, seeds 0 1 2: ~1.5 min
    python benchmarks/bench_study.py --solution  # the solution notebook's design, once: minutes

The costs come from runs of the healthy run (one torch thread, reference stages; a first run
warms the imports and is not counted), for each seed: B, 11 steps with 8 held-out problems; C, the
same at 2 updates per rollout; D, the same with 100 held-out problems. From each run's records,
rollout = median step_seconds of B / 64 and update = (median of C − median of B) / 64; the rest of
a run (its wall time around `failure_runs.trained_records` less its steps) gives
heldout = (rest of D − rest of B) / 92 and start = rest of B − 8 × heldout. Medians and
differences of the rests, not of whole runs, so that a burst of another job's load moves one
number, not all four. The largest over the seeds is printed: an estimate should refuse a design
that would not fit, not admit one.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from dataclasses import replace

import torch

from course.lab.failure_runs import HEALTHY, trained_records
from course.lab.study import (
    ROLLOUTS,
    Study,
    estimate_seconds,
    run_study,
    study_table,
)

SOLUTION = Study("lr", (1e-4, 3e-4), seeds=(0, 1, 2), steps=30)  # solutions/14_your_study.ipynb


def timed(eval_problems: int, seed: int, updates: int = 1) -> tuple[float, float]:
    """(median step seconds, wall seconds less the steps') of an 11-step run."""
    config = replace(HEALTHY, steps=11, eval_every=11, eval_problems=eval_problems,
                     updates_per_rollout=updates, seed=seed, threads=1)
    start = time.perf_counter()
    records, _ = trained_records("healthy", config)
    wall = time.perf_counter() - start
    steps = [r["step_seconds"] for r in records]
    return statistics.median(steps), wall - sum(steps)


def costs(seed: int) -> dict[str, float]:
    (step_b, rest_b), (step_c, _), (_, rest_d) = (timed(8, seed), timed(8, seed, 2),
                                                  timed(100, seed))
    heldout = (rest_d - rest_b) / 92
    return {"start": rest_b - 8 * heldout, "rollout": step_b / ROLLOUTS,
            "update": (step_c - step_b) / ROLLOUTS, "heldout": heldout}


def main() -> None:
    torch.set_num_threads(1)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"load average {open('/proc/loadavg').read().split()[0]}")
    if "--solution" in sys.argv:
        start = time.perf_counter()
        results = run_study(SOLUTION)
        print(f"\nestimated {estimate_seconds(SOLUTION):.0f} s, took "
              f"{time.perf_counter() - start:.0f} s\n\n{study_table(results)}")
        return
    timed(8, 0)  # imports and caches warm: not counted
    measured = {seed: costs(seed) for seed in (0, 1, 2)}
    for seed, cost in measured.items():
        print(f"seed {seed}: " + ", ".join(f"{k} {v:.4f} s" for k, v in cost.items()))
    print("largest: " + ", ".join(f"{k} {max(c[k] for c in measured.values()):.4f} s"
                                  for k in measured[0]))


if __name__ == "__main__":
    main()
