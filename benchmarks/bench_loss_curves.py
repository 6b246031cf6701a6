"""Seven policy-gradient losses on one budget: held-out accuracy against steps, over seeds.

    python benchmarks/bench_loss_curves.py --jobs 3     # 7 losses x seeds 0 1 2, three at a time
    python benchmarks/bench_loss_curves.py --from-json  # the recorded runs' table and figure
    python benchmarks/bench_loss_curves.py --steps 2 --seeds 0 --out /tmp/l --json /tmp/l.json

Each (loss, seed) is one `course.lab.compare.run_variants` run (so one `course.train` run) of the
failure lab's healthy configuration (`course.lab.failure_runs.HEALTHY`: 8 x 8 rollouts per step,
lr 1e-4, one torch thread, 100 held-out problems, one sample each) with `UPDATES` = 4 optimizer
steps per rollout batch for `STEPS` = 12 batches, evaluated every 4. Why 4: with one update the
importance ratio is 1 and every clip is idle (`course.lab.compare`); with four, three updates of
each batch are off the sampler, so the clips, gates and trust regions the losses differ by act.
The losses (`python -m course.train --pg-method`): grpo (PPO clip, arXiv 2402.03300), dapo (with
its clip-higher ε_high = 0.28 and token normalization, arXiv 2503.14476), gspo (arXiv 2507.18071),
cispo (arXiv 2506.13585), and from `course.frontier_loss` sapo (arXiv 2511.20347), gmpo (arXiv
2507.20673) and dppo (arXiv 2602.04879); every other setting is `course.train`'s default.

It prints, per loss and evaluation, the held-out accuracy sampled at τ = 1 as mean ± sample std
over the seeds, the greedy accuracy after the last step and the mean clip fraction (the share of
tokens the loss clipped or masked; SAPO's gate clips none), then which pairs of losses differ by
more than the seed noise (`course.lab.loss_curves.noise_rule`), and the machine. It writes every run's numbers to `--json`
(`course/checkpoints/loss_curves.json`, which the baselines notebook plots) and the figure to
`--figure` (`benchmarks/loss_curves.png`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from multiprocessing import get_context
from pathlib import Path

from machine import cpu_model

from course.lab.failure_runs import HEALTHY
from course.lab.loss_curves import curves_figure, noise_rule, summary
from course.loop.train_config import TrainConfig
from course.paths import CHECKPOINTS

STEPS, UPDATES, EVAL_EVERY = 12, 4, 4
# loss: what its run sets beside --pg-method (DAPO is its clip-higher and its token mean)
VARIANTS = {"grpo": {}, "dapo": {"clip_higher": 0.28, "normalization": "token"}, "gspo": {},
            "cispo": {}, "sapo": {}, "gmpo": {}, "dppo": {}}
BASE = replace(HEALTHY, steps=STEPS, updates_per_rollout=UPDATES, eval_every=EVAL_EVERY)


def one_run(variant: str, seed: int, base: TrainConfig, out: Path) -> dict:
    """Train `variant` on `seed` in this (worker) process: its curve, greedy accuracy after, mean
    clip fraction over the steps, wall and CPU seconds."""
    from course.lab.compare import run_variants  # torch: in the worker

    usage = resource.getrusage(resource.RUSAGE_SELF)
    config = replace(base, **VARIANTS[variant])
    (run,) = run_variants(config, [variant], [config.normalization], [seed], out,
                          log=lambda _: None)
    after = resource.getrusage(resource.RUSAGE_SELF)
    folder = out / f"{variant}-{config.normalization}-seed{seed}"
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return {"variant": variant, "seed": seed, "curve": run["curve"],
            "greedy_after": run["greedy_accuracy_after"],
            "clip_fraction": statistics.mean(r["clip_fraction"] for r in records),
            "wall_seconds": run["wall_seconds"],
            "cpu_seconds": (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime)}


def print_table(rows: dict[str, dict]) -> None:
    steps = next(iter(rows.values()))["steps"]
    print(f"{'loss':<6} " + " ".join(f"{f'step {s}':>13}" for s in steps)
          + f" {'greedy after':>13} {'clip frac':>9}")
    for variant, row in rows.items():
        cells = [f"{m:.3f} ± {s:.3f}" for m, s in row["sampled"] + [row["greedy_after"]]]
        print(f"{variant:<6} " + " ".join(f"{c:>13}" for c in cells)
              + f" {row['clip_fraction'][0]:>9.4f}")


def train_all(base: TrainConfig, seeds: list[int], jobs: int, out: Path) -> list[dict]:
    """Every (loss, seed), `jobs` at a time, each in a fresh worker process (one torch thread)."""
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(one_run, variant, seed, base, out)
                   for variant in VARIANTS for seed in seeds]
        runs = []
        for future in futures:
            runs.append(future.result())
            run = runs[-1]
            print(f"{run['variant']} seed {run['seed']}: {run['curve'][0][1]:.3f} -> "
                  f"{run['curve'][-1][1]:.3f}, {run['wall_seconds']:.0f} s", flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=STEPS, help="rollout batches per run")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one core each)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_loss_curves"),
                        help="a course.train folder per loss and seed")
    parser.add_argument("--json", type=Path, default=CHECKPOINTS / "loss_curves.json")
    parser.add_argument("--figure", type=Path,
                        default=Path(__file__).resolve().parent / "loss_curves.png")
    parser.add_argument("--from-json", action="store_true",
                        help="train nothing: the table and figure of the runs --json holds")
    args = parser.parse_args()
    for flag in ("jobs", "steps"):
        if getattr(args, flag) < 1:
            parser.error(f"argument --{flag}: must be at least 1, got {getattr(args, flag)}")
    if args.from_json:
        made = json.loads(args.json.read_text())
    else:
        start = datetime.datetime.now()
        base = replace(BASE, steps=args.steps)
        runs = train_all(base, args.seeds, args.jobs, args.out)
        minutes = (datetime.datetime.now() - start).total_seconds() / 60
        made = {"made_by": "python benchmarks/bench_loss_curves.py", "date": str(start.date()),
                "machine": f"{cpu_model()}, {os.cpu_count()} cores, {args.jobs} runs at once, "
                           f"load average {os.getloadavg()[0]:.1f} at the end",
                "wall_minutes": minutes, "seeds": args.seeds, "variants": VARIANTS,
                "config": asdict(base) | {"checkpoint": "course/checkpoints/warm_start"},
                "runs": runs}
        args.json.write_text(json.dumps(made) + "\n")
    rows = summary(made["runs"])
    title = (f"{made['config']['steps']} batches of 8 x 8 rollouts, {UPDATES} updates each, "
             f"lr 1e-4, seeds {' '.join(map(str, made['seeds']))}")
    print(f"\nheld-out accuracy sampled at τ = 1, mean ± sample std over seeds; {title}")
    print_table(rows)
    gaps = noise_rule(rows) if len(made["seeds"]) > 1 else ["(one seed: no noise to compare with)"]
    print("\nafter the last step, gaps over twice the larger seed std: "
          + ("; ".join(gaps) if gaps else "none"))
    cpu = sum(r["cpu_seconds"] for r in made["runs"])
    print(f"\n{len(made['runs'])} runs in {made['wall_minutes']:.1f} min of wall time, {cpu:.0f} s "
          f"of CPU; machine: {made['machine']}; {made['date']}")
    curves_figure(rows, title).savefig(args.figure, dpi=100)
    print(f"wrote {args.json} and {args.figure}")


if __name__ == "__main__":
    main()
