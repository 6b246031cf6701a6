"""The CPU runs notebook 09's lab asks of a learner: how long each takes, and what it trains to.

    python benchmarks/bench_lab.py

Times, one after another on one torch thread, one probe of the repair (`failure_runs.rerun(
"high_lr", lr=1e-4)`, 10 steps), the reward exercise (`reward_design.train_with_reward`, 50 steps)
with r1-zero's reward and with the notebook's shaped one (0.1 more for the format), and prints for
each the wall and CPU seconds, the mean reward over its last 10 steps and its last held-out
accuracy; then the notebook's search (`lr_search.LearningRateSearch`, `SEARCH_PROBES` bisection
probes) with its table and time, and the machine. On an idle machine the wall time is the CPU
time; the load average printed at the end says how shared it was.
"""

from __future__ import annotations

import math
import os
import time

import torch
from machine import cpu_model

from course.lab.failure_runs import HEALTHY, rerun
from course.lab.lr_search import SEARCH_PROBES, LearningRateSearch
from course.lab.reward_design import train_with_reward
from course.loop.tasks import r1_zero_reward_fn


def format_bonus(response: str, truth: str) -> dict[str, float]:
    """Notebook 09's shaped reward: r1-zero's, plus 0.1 for the format."""
    scores = r1_zero_reward_fn(response, truth)
    return {"reward": scores["reward"] + 0.1 * scores["format_reward"]}


RUNS = {
    "repair: rerun('high_lr', lr=1e-4)": lambda: rerun("high_lr", lr=HEALTHY.lr)[0],
    "reward exercise: train_with_reward(r1-zero)": lambda: train_with_reward(r1_zero_reward_fn),
    "reward exercise: train_with_reward(+0.1 format)": lambda: train_with_reward(format_bonus),
}


def search() -> LearningRateSearch:
    """The notebook's search: SEARCH_PROBES probes at the geometric mean of the bracket."""
    found = LearningRateSearch()
    for _ in range(SEARCH_PROBES):
        found.probe(math.sqrt(found.learns_at * found.fails_at))
    return found


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
    wall, cpu = time.perf_counter(), time.process_time()
    print(search().table())
    print(f"search: {time.perf_counter() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s CPU")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
