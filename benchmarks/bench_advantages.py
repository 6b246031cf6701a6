"""GRPO, RLOO and REINFORCE++ advantages on one budget: held-out accuracy and advantage variance.

    python benchmarks/bench_advantages.py                   # seeds 0 1 2, two runs at a time
    python benchmarks/bench_advantages.py --steps 5 --seeds 0 --jobs 1     # a quick look

Each (advantage, seed) is one `python -m course.train` process with stage 3's baseline and
normalizer set (`course.advantages`) and everything else the same:
`--steps` steps of 8 x 8 rollouts, lr 1e-4, one torch thread, `--eval-problems` held-out problems
sampled once at the end (temperature 1) and greedily. Per advantage it prints the held-out
accuracy after (sampled, greedy) as the mean ± the sample standard deviation over the seeds, the
advantage variance (the mean over steps of the step's advantage std², `metrics.jsonl`) and the
wall time of a run; then which gaps to GRPO exceed twice the larger seed std, and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from machine import cpu_model

# name -> (--baseline, --advantage-normalizer)
ADVANTAGES = {
    "grpo": ("mean", "std"),
    "rloo": ("leave_one_out", "none"),
    "reinforce++": ("none", "batch"),
    "reinforce++-baseline": ("mean", "batch"),
}
ROOT = Path(__file__).resolve().parent.parent


def train(name: str, seed: int, args: argparse.Namespace, folder: Path) -> dict:
    """One `python -m course.train` run; its summary, with the mean advantage variance added."""
    baseline, normalizer = ADVANTAGES[name]
    out = folder / f"{name}-{seed}"
    command = [sys.executable, "-m", "course.train", "--out", str(out), "--seed", str(seed),
               "--steps", str(args.steps), "--prompts-per-step", "8", "--group-size", "8",
               "--lr", "1e-4", "--eval-every", "0", "--eval-problems", str(args.eval_problems),
               "--eval-samples", "1", "--threads", "1", "--baseline", baseline,
               "--advantage-normalizer", normalizer]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, cwd=ROOT, env=env, capture_output=True, text=True)
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    summary["advantage_variance"] = statistics.mean(r["advantage_std"] ** 2 for r in records)
    return summary


def spread(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-problems", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    args = parser.parse_args()
    start = time.time()
    with tempfile.TemporaryDirectory() as folder, ThreadPoolExecutor(args.jobs) as pool:
        keys = [(name, seed) for name in ADVANTAGES for seed in args.seeds]
        summaries = dict(zip(keys, pool.map(lambda k: train(*k, args, Path(folder)), keys)))
    print(f"{args.steps} steps of 8 x 8, seeds {args.seeds}, {args.eval_problems} held-out "
          "problems; mean ± sample std over the seeds")
    print("| advantage | sampled after | greedy after | advantage variance | wall s |")
    print("|---|---|---|---|---|")
    rows = {}
    for name in ADVANTAGES:
        runs = [summaries[name, seed] for seed in args.seeds]
        rows[name] = spread([r["accuracy_after"] for r in runs])
        greedy = spread([r["greedy_accuracy_after"] for r in runs])
        variance = spread([r["advantage_variance"] for r in runs])
        wall = statistics.mean(r["wall_seconds"] for r in runs)
        print(f"| {name} | {rows[name][0]:.3f} ± {rows[name][1]:.3f} | {greedy[0]:.3f} ± "
              f"{greedy[1]:.3f} | {variance[0]:.3f} ± {variance[1]:.3f} | {wall:.0f} |")
    before = summaries[keys[0]]["accuracy_before"]
    print(f"sampled accuracy before: {before:.3f}")
    for name in list(ADVANTAGES)[1:]:
        gap = rows[name][0] - rows["grpo"][0]
        bar = 2 * max(rows[name][1], rows["grpo"][1])
        verdict = "exceeds" if abs(gap) > bar else "within"
        print(f"{name} − grpo: {gap:+.3f} sampled, {verdict} twice the larger seed std ({bar:.3f})")
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; {time.time() - start:.0f} s of wall time in all")


if __name__ == "__main__":
    main()
