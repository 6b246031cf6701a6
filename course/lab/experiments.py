"""Notebook 08's written experiments: change one thing, train twice per seed, compare the curves.

    python -m course.lab.experiments                      # every experiment, two seeds: minutes
    python -m course.lab.experiments group_size --seeds 0 # one experiment, one seed

An experiment is two arms of the failure lab's healthy run (`failure_runs.HEALTHY`: the tiny model on
the CPU, 8 problems × 8 samples per step) that differ in one option, each trained with the same
seeds, so that the gap between the arms can be held against the gap between two seeds of one arm.
The notebook trains them with the learner's own stages (`implementations`) and asks for a written
answer, graded by a person (nbgrader's manually graded cells, `course.registry.WRITTEN`).

  group_size   G = 2 × 32 problems vs G = 8 × 8 problems: the same 64 rollouts per step, but a
               group with equal rewards has advantage 0 and teaches nothing (Shao et al. 2024,
               arXiv 2402.03300; DAPO's dynamic sampling, arXiv 2503.14476, filters such groups)
  std          divide the centered rewards by the group's std (GRPO) or not (Dr. GRPO, Liu et al.
               2025, arXiv 2503.20783): the gradient halves, and AdamW (Loshchilov & Hutter,
               arXiv 1711.05101) divides the scale back out
  clipping     PPO's clip on or off (Schulman et al. 2017, arXiv 1707.06347) at four optimizer steps
               per rollout, the only way the policy moves away from the one that sampled

What each arm measured, for two seeds, is in benchmarks/README.md ("Written experiments"). The
command has `course.lab.compare`'s guards: a repeated or negative seed is refused by name, and a
Ctrl-C stops at once, says which experiments are whole and exits 130, never reporting a cut-short
run as a whole one.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, replace

import matplotlib
from matplotlib.figure import Figure

from course.cli import INTERRUPTED, Parser
from course.lab.compare import command, refuse_repeats, repeats, stop_if_interrupted
from course.lab.failure_runs import HEALTHY, KEPT, rounded, trained_records
from course.loop.plotting import COURSE_STYLE
from course.loop.train_config import MAX_SEED, flag_types


@dataclass(frozen=True)
class Experiment:
    """Two arms of the healthy run and what to look at."""

    question: str
    arms: dict[str, dict]  # label -> the TrainConfig options that differ from HEALTHY
    metrics: tuple[str, ...]  # per-step metrics drawn side by side, the first the one to predict
    steps: int = HEALTHY.steps


EXPERIMENTS = {
    "group_size": Experiment(
        "How many groups carry a learning signal at G = 2 and at G = 8?",
        {"G = 2, 32 problems": {"group_size": 2, "prompts_per_step": 32},
         "G = 8, 8 problems": {}},
        ("groups_with_signal", "gradient_norm", "reward_mean")),
    "std": Experiment(
        "Does dividing the advantages by the group's std make the policy learn faster?",
        {"std (GRPO)": {}, "no std (Dr. GRPO)": {"advantage_normalizer": "none"}},
        ("gradient_norm", "reward_mean", "kl_to_reference")),
    "clipping": Experiment(
        "What does PPO's clip change when the policy takes four steps per rollout?",
        {"clip ε = 0.2": {"updates_per_rollout": 4},
         "no clip": {"updates_per_rollout": 4, "pg_method": "noclip"}},
        ("clip_fraction", "kl_to_reference", "reward_mean", "groups_with_signal"), steps=25),
}
SEEDS = (0, 1)
TITLES = {"groups_with_signal": "groups with signal", "gradient_norm": "gradient norm (before clip)",
          "reward_mean": "rollout reward", "kl_to_reference": "KL to warm start (k3)",
          "clip_fraction": "clip fraction (tokens)"}

Results = dict[str, dict[int, list[dict]]]  # arm -> seed -> records


def experiment_named(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise ValueError(f"name must be one of {tuple(EXPERIMENTS)}, got {name!r}")
    return EXPERIMENTS[name]


def run_experiment(name: str, implementations=None, seeds=SEEDS, steps: int | None = None,
                   log=print) -> Results:
    """Train both arms of experiment `name` for each seed (CPU, one thread, `steps` steps: the
    experiment's own by default) with `implementations`' stages (None: the reference's). The held-out
    accuracy is measured once, after the last step. Returns arm -> seed -> records (4 significant
    digits, `KEPT` metrics); KeyboardInterrupt where a run was cut short by Ctrl-C."""
    experiment = experiment_named(name)
    steps = experiment.steps if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    if bad := [s for s in seeds if not 0 <= s <= MAX_SEED]:
        raise ValueError(f"seeds must be in [0, {MAX_SEED}], got {bad[0]}")
    if repeated := repeats(seeds):
        raise ValueError(f"seeds must differ: {' '.join(repeated)} given twice")
    results: Results = {}
    for arm, options in experiment.arms.items():
        results[arm] = {}
        for seed in seeds:
            config = replace(HEALTHY, **options, steps=steps, eval_every=steps, seed=seed, threads=1)
            records, summary = trained_records("healthy", config, implementations=implementations)
            stop_if_interrupted(summary)
            results[arm][seed] = [{key: rounded(r[key]) for key in KEPT if key in r} for r in records]
            log(f"{arm}, seed {seed}: {steps} steps in {summary['wall_seconds']:.0f} s")
    return results


def mean_over_steps(records: list[dict], metric: str) -> float:
    """The mean of `metric` over the steps of `records`."""
    return statistics.fmean(r[metric] for r in records)


def experiment_table(name: str, results: Results) -> str:
    """Per arm and seed: each metric's mean over the steps, the rollout reward over the last 10
    steps, and the held-out accuracy after the last step (a markdown table)."""
    metrics = experiment_named(name).metrics
    header = ["arm", "seed", *(f"{key}, mean" for key in metrics), "reward_mean, last 10",
              "held-out accuracy after"]
    rows = [" | ".join(header), " | ".join("---" for _ in header)]
    for arm, runs in results.items():
        for seed, records in runs.items():
            after = records[-1].get("heldout_accuracy_sampled", float("nan"))
            rows.append(" | ".join([arm, str(seed), *(f"{mean_over_steps(records, key):.3f}" for key in metrics),
                                    f"{mean_over_steps(records[-10:], 'reward_mean'):.3f}", f"{after:.2f}"]))
    return "\n".join(rows)


def plot_experiment(name: str, results: Results) -> Figure:
    """One panel per metric of the experiment: one colour per arm, one line style per seed."""
    metrics = experiment_named(name).metrics
    styles = ("-", "--", ":", "-.")
    with matplotlib.rc_context(COURSE_STYLE):
        figure = Figure(figsize=(4.6 * len(metrics), 3.8), layout="constrained")
        axes = figure.subplots(1, len(metrics))
        for axis, key in zip(axes, metrics):
            for colour, (arm, runs) in enumerate(results.items()):
                for k, (seed, records) in enumerate(runs.items()):
                    axis.plot([r["step"] for r in records], [r[key] for r in records],
                              styles[k % len(styles)], color=f"C{colour}", label=f"{arm}, seed {seed}")
            axis.set_title(TITLES.get(key, key))
            axis.set_xlabel("step")
            axis.set_ylabel(key)
            axis.grid(alpha=0.3)
        axes[-1].legend()
    return figure


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course.lab.experiments", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"experiments to run, of {', '.join(EXPERIMENTS)} (default: all)")
    parser.add_argument("--seeds", type=flag_types()["seed"], nargs="+", default=list(SEEDS),
                        help="seeds of each arm, each once")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in EXPERIMENTS]
    if unknown:
        parser.error(f"argument NAME: {unknown[0]!r} is not one of {', '.join(EXPERIMENTS)}")
    refuse_repeats(parser, {"NAME": args.names, "--seeds": args.seeds})
    names, done = args.names or list(EXPERIMENTS), 0
    try:
        for name in names:
            print(f"\n## {name}: {EXPERIMENTS[name].question}\n")
            results = run_experiment(name, seeds=tuple(args.seeds))
            print("\n" + experiment_table(name, results))
            done += 1
    except KeyboardInterrupt:
        print(f"interrupted (Ctrl-C) after {done} of {len(names)} experiments: the tables above "
              "are whole; the experiment cut short has none", file=sys.stderr)
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    command(main, "no table")
