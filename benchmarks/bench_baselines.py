"""SFT, expert iteration and GRPO on one budget: held-out accuracy against examples and wall time.

    python benchmarks/bench_baselines.py                  # the lab's healthy run, seeds 0 1 2
    python benchmarks/bench_baselines.py --steps 10 --seeds 0    # a quick look

Each (method, seed) is one `course.baselines.run` on the failure lab's healthy configuration
(`course.lab.failure_runs.HEALTHY`: 50 steps of 8 x 8 examples, lr 1e-4, one torch thread,
100 held-out problems, one sample each), evaluated every `--eval-every` steps. Per method and
evaluation step it prints the examples spent, the mean training wall time so far (evaluations left
out) and the held-out answer accuracy, sampled at temperature 1 and greedy, as the mean ± the
sample standard deviation over the seeds; then each method's wall and CPU time, and the machine.
The runs go one after another in this process, so on an idle machine wall time is CPU time.
Every run's curve, wall and CPU time go to `--json` too (`course/checkpoints/baselines.json`, which
the baselines notebook plots without training).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch
from machine import cpu_model

from course.baselines.budget import METHODS
from course.baselines.run import run
from course.lab.failure_runs import HEALTHY
from course.paths import CHECKPOINTS

ACCURACIES = ("heldout_accuracy_sampled", "heldout_accuracy_greedy")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def curve(out: Path, summary: dict) -> list[dict]:
    """(step, examples, train_seconds, accuracies) at step 0 and at every evaluated step."""
    start = {"step": 0, "examples": 0, "train_seconds": 0.0,
             ACCURACIES[0]: summary["accuracy_before"],
             ACCURACIES[1]: summary["greedy_accuracy_before"]}
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [start] + [r for r in records if ACCURACIES[0] in r]


def spread(values: list[float]) -> str:
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {deviation:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--steps", type=int, default=HEALTHY.steps)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_baselines"),
                        help="a folder per method and seed, as `python -m course.baselines` writes")
    parser.add_argument("--json", type=Path, default=CHECKPOINTS / "baselines.json",
                        help="every run's curve and times, for the notebook to plot")
    args = parser.parse_args()
    curves, times = {}, {}
    for method in args.methods:
        for seed in args.seeds:
            config = replace(HEALTHY, seed=seed, steps=args.steps, eval_every=args.eval_every)
            out = args.out / method / f"seed{seed}"
            wall, cpu = time.time(), cpu_seconds()
            summary = run(method, config, out, progress=False)
            times.setdefault(method, []).append((time.time() - wall, cpu_seconds() - cpu))
            curves.setdefault(method, []).append(curve(out, summary))
            print(f"{method} seed {seed}: accuracy {summary['accuracy_before']:.3f} -> "
                  f"{summary['accuracy_after']:.3f}, {times[method][-1][0]:.0f} s", flush=True)

    print(f"\nheld-out accuracy over seeds {args.seeds} (mean ± sample std), {args.steps} steps of "
          f"{HEALTHY.prompts_per_step} x {HEALTHY.group_size} examples")
    print(f"{'method':<17} {'step':>4} {'examples':>8} {'train s':>8} {'sampled':>15} "
          f"{'greedy':>15}")
    for method, runs in curves.items():
        for points in zip(*runs):
            seconds = statistics.mean(p["train_seconds"] for p in points)
            print(f"{method:<17} {points[0]['step']:>4} {points[0]['examples']:>8} {seconds:>8.1f} "
                  + " ".join(f"{spread([p[key] for p in points]):>15}" for key in ACCURACIES))
    print(f"\n{'method':<17} {'wall s per run':>15} {'CPU s per run':>15}")
    for method, pairs in times.items():
        walls, cpus = [w for w, _ in pairs], [c for _, c in pairs]
        print(f"{method:<17} {spread(walls):>15} {spread(cpus):>15}")
    machine = (f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
               f"{torch.get_num_threads()} thread, load average {os.getloadavg()[0]:.1f}")
    print(f"\nmachine: {machine}")
    record(args, curves, times, machine)


def record(args: argparse.Namespace, curves: dict, times: dict, machine: str) -> None:
    """Write `args.json`: per method, one entry per seed (its curve, wall and CPU seconds)."""
    keep = ("step", "examples", "train_seconds") + ACCURACIES
    runs = {method: [{"seed": seed, "wall_seconds": wall, "cpu_seconds": cpu,
                      "curve": [{k: point[k] for k in keep} for point in points]}
                     for seed, points, (wall, cpu) in zip(args.seeds, curves[method], times[method])]
            for method in curves}
    made = {"made_by": "python benchmarks/bench_baselines.py", "date": str(datetime.date.today()),
            "machine": machine, "steps": args.steps, "eval_every": args.eval_every,
            "prompts_per_step": HEALTHY.prompts_per_step, "group_size": HEALTHY.group_size,
            "runs": runs}
    args.json.write_text(json.dumps(made, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
