"""PPO with a critic (value head + GAE) beside GRPO on one budget: what the critic costs and buys.

    python benchmarks/bench_critic.py                       # the lab's healthy run, seeds 0 1 2
    python benchmarks/bench_critic.py --steps 5 --seeds 0   # a quick look (no JSON written)

Each (method, seed) trains the warm start on the failure lab's healthy configuration
(`course.lab.failure_runs.HEALTHY`: 50 steps of 8 x 8 rollouts, lr 1e-4, one torch thread,
100 held-out problems, one sample each), evaluated every `--eval-every` steps: PPO is
`course.critic.run.run` (default `CriticConfig`), GRPO `course.loop.train.train`. It prints:
- parameters: the policy, its value head, and the separate critic PPO usually trains (a copy of
  the policy's trunk with the value head in place of the LM head);
- memory per step, ANALYTIC: float32 parameters (4 B) + gradients (4 B) + AdamW's two moments
  (8 B) of what each method trains, plus 4 B per parameter of a frozen reference copy; activations
  are left out (they are the same forward for GRPO and a shared-trunk critic);
- the per-token variance of three advantages of the same rollouts (PPO's, `course.critic.run`):
  GAE's A_t, the group-centered reward (GRPO's baseline before its std division), the bare reward;
- held-out accuracy over the steps, mean ± sample std over the seeds, and wall and CPU time.
A full run (50 steps, eval every 10) writes `course/checkpoints/critic_runs.json` for the notebook.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
from machine import cpu_model

from course.critic.config import CriticConfig
from course.critic.run import run
from course.lab.failure_runs import HEALTHY
from course.loop.models import load_model_and_tokenizer
from course.loop.train import train
from course.paths import CHECKPOINTS

ACCURACIES = ("heldout_accuracy_sampled", "heldout_accuracy_greedy")
VARIANCES = ("advantage_var_gae", "advantage_var_group", "advantage_var_none")
RECORDED = CHECKPOINTS / "critic_runs.json"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def spread(values: list[float], digits: int = 3) -> str:
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {deviation:.{digits}f}"


def parameters_and_memory() -> tuple[dict[str, int], dict[str, int]]:
    """Parameter counts, and the analytic bytes of each method's trained and frozen weights."""
    policy, _ = load_model_and_tokenizer(HEALTHY.checkpoint)
    total = sum(p.numel() for p in policy.parameters())
    lm_head = policy.lm_head.weight.numel()
    head = policy.config.hidden_size + 1
    counts = {"policy": total, "value head": head, "separate critic": total - lm_head + head}
    trained, frozen = 16, 4  # bytes per parameter: weights, gradients, AdamW's m and v; weights
    memory = {"GRPO (policy)": trained * total,
              "PPO, value head on the policy": trained * (total + head),
              "PPO, separate critic": trained * (total + counts["separate critic"]),
              "PPO, separate critic + reference (InstructGPT)":
                  trained * (total + counts["separate critic"]) + frozen * total}
    return counts, memory


def curve(out: Path, summary: dict) -> list[list[float]]:
    """[step, sampled, greedy] at step 0 and at every evaluated step."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    start = [0, summary["accuracy_before"], summary["greedy_accuracy_before"]]
    return [start] + [[r["step"], *(r[key] for key in ACCURACIES)]
                      for r in records if ACCURACIES[0] in r]


def train_both(seeds: list[int], steps: int, eval_every: int, root: Path) -> dict:
    """Every (method, seed): its curve, its times and (PPO) its advantage variances per step."""
    results = {"curves": {"ppo": {}, "grpo": {}}, "seconds": {"ppo": {}, "grpo": {}},
               "advantage_variance": {}}
    for method in ("ppo", "grpo"):
        for seed in seeds:
            config = replace(HEALTHY, seed=seed, steps=steps, eval_every=eval_every)
            out = root / method / f"seed{seed}"
            wall, cpu = time.time(), cpu_seconds()
            summary = (run(config, CriticConfig(), out, progress=False) if method == "ppo"
                       else train(config, out, progress=False))
            results["seconds"][method][seed] = [time.time() - wall, cpu_seconds() - cpu]
            results["curves"][method][seed] = curve(out, summary)
            if method == "ppo":
                records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
                results["advantage_variance"][seed] = {
                    key: [round(r[key], 5) for r in records] for key in VARIANCES}
            print(f"{method} seed {seed}: accuracy {summary['accuracy_before']:.3f} -> "
                  f"{summary['accuracy_after']:.3f}, {results['seconds'][method][seed][0]:.0f} s",
                  flush=True)
    return results


def print_tables(results: dict, counts: dict, memory: dict) -> None:
    print(f"\n{'parameters':<40} {'count':>10}")
    for name, count in counts.items():
        print(f"{name:<40} {count:>10,}")
    print(f"\n{'memory per step (analytic, no activations)':<48} {'MB':>8}")
    for name, size in memory.items():
        print(f"{name:<48} {size / 1e6:>8.1f}")
    variances = results["advantage_variance"]
    print("\nper-token advantage variance on PPO's rollouts (mean over steps, then ± over seeds)")
    for label, window in (("steps 1-10", slice(0, 10)), ("last 10 steps", slice(-10, None)),
                          ("all steps", slice(None))):
        means = {key: [statistics.mean(v[key][window]) for v in variances.values()]
                 for key in VARIANCES}
        print(f"  {label:<14}" + "".join(f" {key.removeprefix('advantage_var_'):>6} "
                                         f"{spread(values, 4):>17}"
                                         for key, values in means.items()))
    print(f"\n{'method':<6} {'step':>4} {'sampled':>15} {'greedy':>15}")
    for method, runs in results["curves"].items():
        for points in zip(*runs.values()):
            print(f"{method:<6} {points[0][0]:>4} "
                  + " ".join(f"{spread([p[k] for p in points]):>15}" for k in (1, 2)))
    print(f"\n{'method':<6} {'wall s per run':>16} {'CPU s per run':>16}")
    for method, runs in results["seconds"].items():
        print(f"{method:<6} {spread([w for w, _ in runs.values()], 1):>16} "
              f"{spread([c for _, c in runs.values()], 1):>16}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=HEALTHY.steps)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_critic"),
                        help="a folder per method and seed")
    args = parser.parse_args()
    torch.set_num_threads(HEALTHY.threads or 1)
    counts, memory = parameters_and_memory()
    results = train_both(args.seeds, args.steps, args.eval_every, args.out)
    print_tables(results, counts, memory)
    machine = (f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
               f"{torch.get_num_threads()} thread, load average {os.getloadavg()[0]:.1f}")
    print(f"\nmachine: {machine}")
    if args.steps == HEALTHY.steps and args.eval_every == 10:
        RECORDED.write_text(json.dumps({
            "command": "python benchmarks/bench_critic.py", "seeds": args.seeds,
            "date": datetime.date.today().isoformat(), "machine": machine,
            "config": {**asdict(replace(HEALTHY, eval_every=args.eval_every)),
                       "checkpoint": "course/checkpoints/warm_start"},
            "critic": asdict(CriticConfig()), "parameters": counts, "memory_bytes": memory,
            **results}, indent=1) + "\n")
        print(f"wrote {RECORDED}")


if __name__ == "__main__":
    main()
