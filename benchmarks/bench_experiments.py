"""Notebook 08's written experiments, run as the notebook runs them: how long each takes, and whether
the gap between its arms is larger than the gap between two seeds of one arm.

    python benchmarks/bench_experiments.py            # all three, seeds 0 and 1: about 6 minutes

Each experiment of `course.lab.experiments` trains its two arms for each seed on one torch thread
with the reference stages. Printed per experiment: its wall and CPU seconds, then per metric the
mean over the steps of each (arm, seed), the gap between the arms (of the means over seeds) and the
largest gap between the two seeds of one arm: an effect is the first gap where it is larger than the
second. Then the held-out accuracy after the last step, and the machine.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
from machine import cpu_model

from course.lab.experiments import EXPERIMENTS, SEEDS, mean_over_steps, run_experiment


def main() -> None:
    torch.set_num_threads(1)
    for name, experiment in EXPERIMENTS.items():
        wall, cpu = time.perf_counter(), time.process_time()
        results = run_experiment(name, seeds=SEEDS, log=lambda _: None)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"\n{name} ({experiment.steps} steps x {len(experiment.arms)} arms x {len(SEEDS)} seeds): "
              f"{wall:.0f} s wall, {cpu:.0f} s CPU")
        arms = list(results)
        print(f"{'metric':26}" + "".join(f"{arm + ', s' + str(s):>24}" for arm in arms for s in SEEDS)
              + f"{'arm gap':>9}{'seed gap':>9}")
        rows = {f"{metric}, mean": lambda records, metric=metric: mean_over_steps(records, metric)
                for metric in experiment.metrics}
        rows["reward_mean, last 10"] = lambda records: mean_over_steps(records[-10:], "reward_mean")
        # measured once, after the last step
        rows["held-out accuracy"] = lambda records: records[-1]["heldout_accuracy_sampled"]
        for label, value_of in rows.items():
            per_arm = {arm: [value_of(results[arm][s]) for s in SEEDS] for arm in arms}
            first, second = (statistics.fmean(values) for values in per_arm.values())
            seed_gap = max(max(values) - min(values) for values in per_arm.values())
            print(f"{label:26}" + "".join(f"{value:>24.3f}" for values in per_arm.values() for value in values)
                  + f"{abs(first - second):>9.3f}{seed_gap:>9.3f}")
    print(f"\nmachine: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
