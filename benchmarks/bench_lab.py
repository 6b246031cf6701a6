"""The CPU runs notebook 08's lab asks of a learner: how long each takes, and what it trains to.

    python benchmarks/bench_lab.py

Times, one after another on one torch thread, the lab's repair (`failure_runs.rerun("high_lr",
lr=1e-4)`, 10 steps) and the reward exercise (`reward_design.train_with_reward` with r1-zero's
reward, 50 steps), and prints for each the wall and CPU seconds, the mean reward over its last 10
steps and its last held-out accuracy, with the machine. On an idle machine the wall time is the
CPU time; the load average printed at the end says how shared it was.
"""

from __future__ import annotations

import os
import time

import torch
from machine import cpu_model

from course.lab.failure_runs import HEALTHY, rerun
from course.lab.reward_design import train_with_reward
from course.loop.tasks import r1_zero_reward_fn

RUNS = {
    "repair: rerun('high_lr', lr=1e-4)": lambda: rerun("high_lr", lr=HEALTHY.lr),
    "reward exercise: train_with_reward(r1-zero)": lambda: train_with_reward(r1_zero_reward_fn),
}


def timed(run) -> tuple[float, float, list[dict]]:
    """(wall s, CPU s of this process, records) of one run."""
    wall, cpu = time.perf_counter(), time.process_time()
    records = run()
    return time.perf_counter() - wall, time.process_time() - cpu, records


def main() -> None:
    torch.set_num_threads(1)
    print(f"{'run':46} {'steps':>5} {'wall s':>7} {'CPU s':>6} {'reward, last 10':>15} {'held-out':>8}")
    for name, run in RUNS.items():
        wall, cpu, records = timed(run)
        last = [r["reward_mean"] for r in records[-10:]]
        held_out = [r["heldout_accuracy_sampled"] for r in records if "heldout_accuracy_sampled" in r][-1]
        print(f"{name:46} {len(records):>5} {wall:>7.1f} {cpu:>6.1f} {sum(last) / len(last):>15.3f} "
              f"{held_out:>8.2f}")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
