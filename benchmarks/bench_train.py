"""The course's end-to-end bar: does the default GRPO run learn, and how long does it take?

    python benchmarks/bench_train.py                 # default run, seeds 0 1 2, one after another
    python benchmarks/bench_train.py --steps 20      # a quick look

Runs `course.train` with its default config once per seed (held-out problems and their sampling
noise are the same for every seed) and prints held-out answer accuracy before and after, sampled
at temperature 1 and greedy, the wall time and the CPU time (user + system) of each run, and the
medians over seeds, with the machine it ran on. The bar: median sampled accuracy up by at least 40
points in at most 5 minutes on a 2-core CPU. A run uses one thread, so on an idle machine its wall
time is its CPU time; on a shared one the wall time grows and the CPU time does not, and the load
average printed at the end says how shared it was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
from dataclasses import replace
from pathlib import Path

import torch

from course.loop.train import TrainConfig, train

COLUMNS = ("accuracy_before", "accuracy_after", "greedy_accuracy_before", "greedy_accuracy_after",
           "wall_seconds", "cpu_seconds")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_train"),
                        help="one folder per seed, as written by `python -m course.train --out`")
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        cpu_start = cpu_seconds()
        summary = train(replace(TrainConfig(), seed=seed, steps=args.steps), args.out / f"seed{seed}")
        summary["cpu_seconds"] = cpu_seconds() - cpu_start
        rows.append({"seed": seed, **{k: summary[k] for k in COLUMNS}})
        print(json.dumps(rows[-1]), flush=True)

    print(f"\nGRPO, default config, {args.steps} steps; machine: {platform.machine()}, "
          f"{os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'seed':>6} " + " ".join(f"{c:>22}" for c in COLUMNS))
    for row in rows:
        print(f"{row['seed']:>6} " + " ".join(f"{row[c]:>22.3f}" for c in COLUMNS))
    print(f"{'median':>6} " + " ".join(f"{statistics.median(r[c] for r in rows):>22.3f}" for c in COLUMNS))
    gain = statistics.median(r["accuracy_after"] - r["accuracy_before"] for r in rows)
    print(f"median sampled-accuracy gain: {100 * gain:+.1f} points; "
          f"load average (1, 5, 15 min): {os.getloadavg()}")


if __name__ == "__main__":
    main()
