"""Notebook 08's written experiments: change one thing, train twice per seed, compare the curves.

    python -m course.lab.experiments                      # all, two seeds (+ a third): minutes
    python -m course.lab.experiments group_size --seeds 0 # one experiment, one seed

An experiment is two arms of the failure lab's healthy run (`failure_runs.HEALTHY`: the tiny model
on the CPU, 8 problems × 8 samples per step) that differ in one option, each trained with the same
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

Two seeds are a thin measure of the noise, so with two a third is run where it decides: where any
headline metric (`headline`: each drawn metric's mean over the steps, the rollout reward of the last
10 steps, the held-out accuracy after the last) has an arm gap under twice its seed gap over the
first two seeds (`needs_third_seed`; the arm gap is the difference of the two arms' means over
seeds, the seed gap the largest range of one arm's values over its seeds). An effect is an arm gap
above the seed gap of every seed run; the table names the metrics that asked for the third seed.
What each arm measured is in benchmarks/README.md ("Written experiments"). The command has
`course.lab.compare`'s guards: a repeated or negative seed is refused by name, and a Ctrl-C stops at
once (a third seed's runs included), says which experiments are whole and exits 130, never
reporting a cut-short run as a whole one.
"""

from __future__ import annotations

import itertools
import statistics
import sys
from collections.abc import Callable
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
# With two seeds, a third where a headline metric's arm gap is under this many seed gaps.
THIRD_SEED_FACTOR = 2
TITLES = {"groups_with_signal": "groups with signal", "gradient_norm": "gradient norm (before "
                                                                       "clip)",
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
    experiment's own by default) with `implementations`' stages (None: the reference's). The
    held-out accuracy is measured once, after the last step. With two seeds, a third (the least
    seed not given) where `needs_third_seed` names a metric. Returns arm -> seed -> records (4
    significant digits, `KEPT` metrics); KeyboardInterrupt where a run was cut short by Ctrl-C."""
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
    results = _train_arms(experiment, seeds, steps, implementations, log)
    if len(seeds) == 2 and (close := needs_third_seed(name, results)):
        third = next(seed for seed in itertools.count() if seed not in seeds)
        log(f"a third seed, {third}: the arm gap of {', '.join(close)} is under "
            f"{THIRD_SEED_FACTOR} x the seed gap")
        for arm, runs in _train_arms(experiment, (third,), steps, implementations, log).items():
            results[arm].update(runs)
    return results


def _train_arms(experiment: Experiment, seeds, steps: int, implementations, log) -> Results:
    """Both arms of `experiment` for each of `seeds`; KeyboardInterrupt at a cut-short run."""
    results: Results = {}
    for arm, options in experiment.arms.items():
        results[arm] = {}
        for seed in seeds:
            config = replace(HEALTHY, **options, steps=steps, eval_every=steps, seed=seed,
                             threads=1)
            records, summary = trained_records("healthy", config, implementations=implementations)
            stop_if_interrupted(summary)
            results[arm][seed] = [{key: rounded(r[key]) for key in KEPT if key in r}
                                  for r in records]
            log(f"{arm}, seed {seed}: {steps} steps in {summary['wall_seconds']:.0f} s")
    return results


def mean_over_steps(records: list[dict], metric: str) -> float:
    """The mean of `metric` over the steps of `records`."""
    return statistics.fmean(r[metric] for r in records)


def headline(name: str) -> dict[str, Callable[[list[dict]], float]]:
    """What an experiment is judged on, label -> its value for one run's records: each drawn
    metric's mean over the steps, the rollout reward over the last 10 steps, and the held-out
    accuracy after the last step (NaN where it was not measured)."""
    rows: dict[str, Callable[[list[dict]], float]] = {
        f"{key}, mean": lambda records, key=key: mean_over_steps(records, key)
        for key in experiment_named(name).metrics}
    rows["reward_mean, last 10"] = lambda records: mean_over_steps(records[-10:], "reward_mean")
    rows["held-out accuracy after"] = lambda records: records[-1].get("heldout_accuracy_sampled",
                                                                      float("nan"))
    return rows


def gaps(name: str, results: Results, seeds=None) -> dict[str, tuple[float, float]]:
    """Headline label -> (arm gap, seed gap) over `seeds` (default: every seed of `results`): the
    gap between the two arms' means over the seeds, and the largest range of one arm's values."""
    out = {}
    for label, value_of in headline(name).items():
        per_arm = [[value_of(runs[seed]) for seed in (runs if seeds is None else seeds)]
                   for runs in results.values()]
        first, second = (statistics.fmean(values) for values in per_arm)
        out[label] = (abs(first - second), max(max(values) - min(values) for values in per_arm))
    return out


def needs_third_seed(name: str, results: Results) -> list[str]:
    """The headline metrics whose arm gap over the first two seeds of `results` is under
    `THIRD_SEED_FACTOR` times their seed gap: too close to the noise to call from two seeds."""
    first_two = list(next(iter(results.values())))[:2]
    return [label for label, (arm_gap, seed_gap) in gaps(name, results, first_two).items()
            if arm_gap < THIRD_SEED_FACTOR * seed_gap]


def experiment_table(name: str, results: Results) -> str:
    """Per arm and seed, each headline value (a markdown table); then, with two seeds or more, per
    headline metric its arm gap and seed gap over every seed run and whether that is an effect,
    and with three, the metrics that asked for the third (`needs_third_seed`)."""
    rows_of = headline(name)
    header = ["arm", "seed", *rows_of]
    rows = [" | ".join(header), " | ".join("---" for _ in header)]
    for arm, runs in results.items():
        for seed, records in runs.items():
            values = [value_of(records) for value_of in rows_of.values()]
            rows.append(" | ".join([arm, str(seed), *(f"{v:.3f}" for v in values[:-1]),
                                    f"{values[-1]:.2f}"]))
    seeds = list(next(iter(results.values())))
    if len(seeds) < 2:
        return "\n".join([*rows, "", "one seed: no seed gap to hold the arm gaps against"])
    rows += ["", f"metric | arm gap | seed gap (seeds {', '.join(map(str, seeds))}) | effect",
             "--- | --- | --- | ---"]
    rows += [f"{label} | {arm_gap:.3f} | {seed_gap:.3f} | "
             f"{'yes' if arm_gap > seed_gap else 'no: within the seed noise'}"
             for label, (arm_gap, seed_gap) in gaps(name, results).items()]
    if len(seeds) == 3 and (close := needs_third_seed(name, results)):
        rows += ["", f"third seed {seeds[2]}: over seeds {seeds[0]} and {seeds[1]} the arm gap of "
                 f"{', '.join(close)} was under {THIRD_SEED_FACTOR} x its seed gap"]
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
                              styles[k % len(styles)], color=f"C{colour}", label=f"{arm}, seed "
                                                                                 f"{seed}")
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
