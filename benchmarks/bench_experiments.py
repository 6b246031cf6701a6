"""Notebook 08's written experiments, run as the notebook runs them: how long each takes, and
whether the gap between its arms is larger than the gap between the seeds of one arm.

    python benchmarks/bench_experiments.py            # all three, seeds 0 and 1 (+ 2): 6-9 minutes

Each experiment of `course.lab.experiments` trains its two arms for seeds 0 and 1 with the reference
stages, on one torch thread, and a third seed (2) where a headline metric's arm gap is under twice
its seed gap (`course.lab.experiments.needs_third_seed`). Printed per experiment: its wall and CPU
seconds and the metrics that asked for the third seed, then per headline metric the value of each
(arm, seed), the gap between the arms (of the means over seeds) and the largest gap between two
seeds of one arm (`course.lab.experiments.gaps`): an effect is the first gap where it is larger than
the second. Then the machine.
"""

from __future__ import annotations

import os
import time

import torch
from machine import cpu_model

from course.lab.experiments import (
    EXPERIMENTS,
    SEEDS,
    gaps,
    headline,
    needs_third_seed,
    run_experiment,
)


def main() -> None:
    torch.set_num_threads(1)
    for name, experiment in EXPERIMENTS.items():
        wall, cpu = time.perf_counter(), time.process_time()
        results = run_experiment(name, seeds=SEEDS, log=lambda _: None)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        seeds = list(next(iter(results.values())))
        third = (f"; third seed asked for by {', '.join(needs_third_seed(name, results))}"
                 if len(seeds) > len(SEEDS) else "; no third seed")
        print(f"\n{name} ({experiment.steps} steps x {len(experiment.arms)} arms x {len(seeds)} "
              f"seeds): {wall:.0f} s wall, {cpu:.0f} s CPU{third}")
        print(f"{'metric':26}" + "".join(f"{arm + ', s' + str(s):>24}" for arm in results
                                         for s in seeds) + f"{'arm gap':>9}{'seed gap':>9}")
        arm_and_seed_gaps = gaps(name, results)
        for label, value_of in headline(name).items():
            values = [value_of(runs[s]) for runs in results.values() for s in seeds]
            arm_gap, seed_gap = arm_and_seed_gaps[label]
            print(f"{label:26}" + "".join(f"{value:>24.3f}" for value in values)
                  + f"{arm_gap:>9.3f}{seed_gap:>9.3f}")
    print(f"\nmachine: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
