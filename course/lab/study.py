"""Notebook 14's study: one knob of the healthy run, two or three values, three seeds or more.

    python -m course.lab.study --knob lr --values 1e-4 3e-4 --seeds 0 1 2 --steps 30
    python -m course.lab.study --knob kl_beta --values 0 0.1 --estimate   # the cost, no run

An arm is the failure lab's healthy run (`failure_runs.HEALTHY`: the tiny model on the CPU, 8
problems × 8 samples per step) with the knob at one value (`MENU`); every arm is trained with
every seed, so the spread between the seeds of one arm is the noise a gap between arms is held
against. Before any run the study's cost is estimated (`estimate_seconds`, from the per-rollout
costs `COST` measured on the course's CPU, benchmarks/README.md, "Your study") and a design over
the budget is refused (`OverBudget`), saying by how much and which number of steps fits. Each
run prints a progress line. `study_table` gives, per arm, the mean ± std (the sample std, n − 1,
as `statistics.stdev`) over the seeds of four numbers per run (`SUMMARIES`), and which gaps between
arms exceed twice the larger std (a rule of thumb for few seeds, stricter than the standard error
s/√n; Agarwal et al. 2021, arXiv 2108.13264, on how few-seed RL comparisons mislead);
`plot_study` draws each seed's number and the mean ± std. The reward knob adds a bonus for the
format to r1-zero's reward (Guo et al. 2025, arXiv 2501.12948; `shaped_reward_fn`).

The guards are `course.lab.compare`'s: a repeated or negative seed, an unknown knob or a value the
knob does not take is refused by name before anything trains, and a Ctrl-C stops at once, exits
130 and prints no table, never one of a cut-short run.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import combinations

import matplotlib
from matplotlib.figure import Figure

from course.cli import INTERRUPTED, Parser, flag_type, out_of_range
from course.lab.compare import command, refuse_repeats, repeats, stop_if_interrupted
from course.lab.failure_runs import HEALTHY, KEPT, rounded, trained_records
from course.lab.reward_design import RewardedAddition
from course.loop.plotting import COURSE_STYLE
from course.loop.tasks import r1_zero_reward_fn
from course.loop.train_config import MAX_SEED, ConfigError, TrainConfig, flag_types
from course.variants import LOSS_NORMALIZATIONS, PG_METHODS

BUDGET_S = 600.0  # a laptop's ten minutes
MIN_SEEDS = 3  # two seeds give one gap, not a spread
ROLLOUTS = HEALTHY.prompts_per_step * HEALTHY.group_size  # 64 per step in every arm
# Seconds on the course's 2-core CPU at a load average of 2.3 (benchmarks/README.md, "Your study":
# fitted to the wall times of "Written experiments"): a run's start (the policy, its reference and
# sampler), one rollout sampled and trained on once, each further update on it, and one held-out
# problem (scored before and after the run, sampled and greedy).
COST = {"start": 1.5, "rollout": 0.0075, "update": 0.0040, "heldout": 0.025}


@dataclass(frozen=True)
class Knob:
    """One entry of the menu: what it changes, and the healthy run's options at a value."""

    what: str
    kind: type  # float, int or str: how the command line reads a value
    problem: Callable[[object], str | None]  # why a value cannot be an arm (None: it can)
    options: Callable[[object], dict]  # value -> the TrainConfig options that differ from HEALTHY


def _between(low: float, high: float, inclusive: bool = True) -> Callable[[object], str | None]:
    def problem(value) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, got {value!r}"
        return out_of_range(value, low, inclusive, high)
    return problem


def _one_of(allowed: tuple) -> Callable[[object], str | None]:
    return lambda value: None if value in allowed else f"must be one of {allowed}, got {value!r}"


def _group_size_problem(value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 2 or ROLLOUTS % value:
        return f"must be an int >= 2 that divides the {ROLLOUTS} rollouts per step, got {value!r}"
    return None


# Two updates per rollout where the knob is a clip: at one, the ratio is 1 and no clip acts.
MENU = {
    "loss": Knob("the policy-gradient loss (notebooks 04-05), at 2 updates per rollout", str,
                 _one_of(PG_METHODS + ("dapo",)),
                 lambda v: {"pg_method": v, "updates_per_rollout": 2}),
    "group_size": Knob(f"G samples per problem, {ROLLOUTS} // G problems: the same rollouts",
                       int, _group_size_problem,
                       lambda v: {"group_size": v, "prompts_per_step": ROLLOUTS // v}),
    "lr": Knob("AdamW's learning rate (the healthy run's is 1e-4)", float, _between(0, 1e-2, False),
               lambda v: {"lr": v}),
    "normalization": Knob("the loss normalization (notebook 06)", str,
                          _one_of(LOSS_NORMALIZATIONS), lambda v: {"normalization": v}),
    "kl_beta": Knob("β of the KL penalty to the warm start (notebook 05)", float, _between(0, 10),
                    lambda v: {"kl_beta": v}),
    "clip_higher": Knob("DAPO's ε_high (0: ε_low = 0.2), pg_method dapo at 2 updates per rollout",
                        float, _between(0, 1),
                        lambda v: {"pg_method": "dapo", "updates_per_rollout": 2,
                                   "clip_higher": v}),
    "temperature": Knob("the rollouts' sampling temperature τ", float, _between(0.1, 3),
                        lambda v: {"temperature": v}),
    "format_bonus": Knob("reward shaping: r1-zero's reward + this × the format reward", float,
                         _between(0, 1), lambda v: {}),
}


def shaped_reward_fn(bonus: float) -> Callable[[str, str], dict[str, float]]:
    """r1-zero's scores (`course.loop.tasks`) with `bonus` × the format reward added to `reward`:
    a right answer 1 + bonus, a wrong one in the format bonus, one out of it 0 (the order
    `reward_design.reward_holes` asks for)."""
    def reward_fn(response: str, ground_truth: str) -> dict[str, float]:
        scores = r1_zero_reward_fn(response, ground_truth)
        return {**scores, "reward": scores["reward"] + bonus * scores["format_reward"]}
    return reward_fn


@dataclass(frozen=True)
class Study:
    """A design: one knob of `MENU`, its values (the arms), the seeds, the steps of each run."""

    knob: str
    values: tuple
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 30
    eval_problems: int = HEALTHY.eval_problems  # held-out problems scored after each run

    def __post_init__(self):
        for name in ("values", "seeds"):  # a list is taken as the tuple it holds
            given = getattr(self, name)
            if isinstance(given, (str, bytes)) or not hasattr(given, "__iter__"):
                raise ValueError(f"{name} must be a sequence, got {given!r}")
            object.__setattr__(self, name, tuple(given))
        check_study(self)


def check_study(study: Study) -> None:
    """Raise ValueError naming the first part of `study` that cannot run."""
    if study.knob not in MENU:
        raise ValueError(f"knob must be one of {tuple(MENU)}, got {study.knob!r}")
    if not 2 <= len(study.values) <= 3:
        raise ValueError(f"values must be 2 or 3 values of {study.knob} (the arms), got "
                         f"{len(study.values)}")
    for value in study.values:
        if problem := MENU[study.knob].problem(value):
            raise ValueError(f"values: {study.knob} {problem}")
    if repeated := repeats(study.values):
        raise ValueError(f"values must differ: {' '.join(repeated)} given twice")
    seeds = study.seeds
    if len(seeds) < MIN_SEEDS or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise ValueError(f"seeds must be at least {MIN_SEEDS} ints (a spread needs three), got "
                         f"{seeds!r}")
    if bad := [s for s in seeds if not 0 <= s <= MAX_SEED]:
        raise ValueError(f"seeds must be in [0, {MAX_SEED}], got {bad[0]}")
    if repeated := repeats(seeds):
        raise ValueError(f"seeds must differ: {' '.join(repeated)} given twice; a repeat is the "
                         "same run again, not another sample")
    for name in ("steps", "eval_problems"):
        value = getattr(study, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def arm_label(study: Study, value) -> str:
    return f"{study.knob} = {value:g}" if isinstance(value, float) else f"{study.knob} = {value}"


def config_of(study: Study, value, seed: int) -> TrainConfig:
    """The healthy run with the knob at `value`: `study.steps` steps, one held-out test after the
    last (of `study.eval_problems` problems), one CPU thread."""
    return replace(HEALTHY, **MENU[study.knob].options(value), steps=study.steps,
                   eval_every=study.steps, eval_problems=study.eval_problems, seed=seed,
                   threads=1)


def run_seconds(config: TrainConfig) -> float:
    """The estimated wall time of one run, from `COST`: start, steps × rollouts × (the first
    update + the further ones), the held-out problems."""
    rollouts = config.prompts_per_step * config.group_size
    per_rollout = COST["rollout"] + (config.updates_per_rollout - 1) * COST["update"]
    return COST["start"] + config.steps * rollouts * per_rollout + config.eval_problems * COST[
        "heldout"]


def estimate_seconds(study: Study) -> float:
    """The estimated wall time of the whole study: every arm, every seed."""
    return sum(run_seconds(config_of(study, value, seed))
               for value in study.values for seed in study.seeds)


class OverBudget(ValueError):
    """A design whose estimated cost exceeds the budget; the message says what to cut."""


def budget_problem(study: Study, budget_s: float) -> str | None:
    """Why `study` does not fit in `budget_s` seconds (None where it does): the estimate, and the
    steps that would fit with these arms and seeds."""
    estimate = estimate_seconds(study)
    if estimate <= budget_s:
        return None
    # the estimate is linear in the steps: fixed + steps × per_step
    one, two = (estimate_seconds(replace(study, steps=steps)) for steps in (1, 2))
    fixed, per_step = 2 * one - two, two - one
    fits = int((budget_s - fixed) // per_step)
    runs = len(study.values) * len(study.seeds)
    cut = (f"cut steps to {fits} or fewer" if fits >= 1 else
           "even 1 step per run is over it: fewer arms or seeds, or fewer eval_problems")
    return (f"the design needs about {estimate / 60:.1f} min ({runs} runs: {len(study.values)} "
            f"arms × {len(study.seeds)} seeds of {study.steps} steps × {ROLLOUTS} rollouts, "
            f"about {estimate / runs:.0f} s each on the course's CPU), over the budget of "
            f"{budget_s / 60:.1f} min; {cut} (the seeds cannot go below {MIN_SEEDS}), or raise "
            f"the budget if you have the time")


Results = dict[str, dict[int, list[dict]]]  # arm -> seed -> records


def _checked(study: Study, implementations) -> None:
    """Raise ValueError naming the knob's value whose run the stages cannot train, before any
    run (`course.loop.train.checked_train_step`)."""
    from course.loop.train import checked_train_step  # torch: after the design is checked

    for value in study.values:
        try:
            checked_train_step(config_of(study, value, study.seeds[0]), implementations, 1)
        except ConfigError as error:
            raise ValueError(f"values: {arm_label(study, value)} cannot run: {error}") from None


def run_study(study: Study, implementations=None, budget_s: float = BUDGET_S, log=print,
              results: Results | None = None) -> Results:
    """Train every arm of `study` with every seed, with `implementations`' stages (None: the
    reference's), after refusing a design over `budget_s` seconds (`OverBudget`). One progress
    line per run. Returns arm -> seed -> records (`KEPT`, 4 significant digits), filled in
    `results` as each run ends; KeyboardInterrupt where a run was cut short by Ctrl-C."""
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or budget_s <= 0:
        raise ValueError(f"budget_s must be a positive number of seconds, got {budget_s!r}")
    if problem := budget_problem(study, budget_s):
        raise OverBudget(f"refused: {problem}")
    _checked(study, implementations)
    results = {} if results is None else results
    start = time.perf_counter()
    runs = [(value, seed) for value in study.values for seed in study.seeds]
    for done, (value, seed) in enumerate(runs, start=1):
        config = config_of(study, value, seed)
        task = (RewardedAddition(shaped_reward_fn(value)) if study.knob == "format_bonus"
                else None)
        records, summary = trained_records("healthy", config, task=task,
                                           implementations=implementations)
        stop_if_interrupted(summary)
        results.setdefault(arm_label(study, value), {})[seed] = [
            {key: rounded(r[key]) for key in KEPT if key in r} for r in records]
        elapsed = time.perf_counter() - start  # the pace so far: a busy machine runs slower
        log(f"[{done}/{len(runs)}] {arm_label(study, value)}, seed {seed}: {study.steps} steps "
            f"in {summary['wall_seconds']:.0f} s (estimated {run_seconds(config):.0f}); "
            f"{elapsed:.0f} s so far, about {elapsed / done * (len(runs) - done):.0f} s to go")
    return results


# what one run is summarized by: name -> (metric of KEPT, the last steps it is averaged over;
# None: all of them)
SUMMARIES = {"held-out accuracy": ("heldout_accuracy_sampled", 1),
             "reward, last 10 steps": ("reward_mean", 10),
             "gradient norm, mean": ("gradient_norm", None),
             "KL, last 10 steps": ("kl_to_reference", 10)}


def run_numbers(records: list[dict]) -> dict[str, float]:
    """`SUMMARIES` of one run: the held-out accuracy (sampled at τ = 1) after the last step, the
    rollout reward and the KL to the warm start over the last 10 steps, the gradient norm (before
    the clip) over all of them."""
    numbers = {}
    for name, (metric, last) in SUMMARIES.items():
        values = [r[metric] for r in records if metric in r]
        numbers[name] = statistics.fmean(values[-last:] if last else values)
    return numbers


def arm_statistics(results: Results) -> dict[str, dict[str, tuple[float, float, int]]]:
    """arm -> summary -> (mean, sample std (n − 1), n) over the arm's seeds."""
    statistics_of = {}
    for arm, runs in results.items():
        numbers = [run_numbers(records) for records in runs.values()]
        statistics_of[arm] = {name: (statistics.fmean(n[name] for n in numbers),
                                     statistics.stdev(n[name] for n in numbers), len(numbers))
                              for name in SUMMARIES}
    return statistics_of


def gaps(results: Results) -> list[tuple[str, str, str, float, float]]:
    """(summary, arm a, arm b, mean b − mean a, twice the larger std of the two) for each pair of
    arms: a gap is beyond the seed noise where |gap| exceeds the second number."""
    found = []
    for (a, of_a), (b, of_b) in combinations(arm_statistics(results).items(), 2):
        for name in SUMMARIES:
            found.append((name, a, b, of_b[name][0] - of_a[name][0],
                          2 * max(of_a[name][1], of_b[name][1])))
    return found


def study_table(results: Results) -> str:
    """Two markdown tables: per arm, each summary's mean ± std (n seeds); per pair of arms and
    summary, the gap, twice the larger std, and whether the gap exceeds it."""
    names = list(SUMMARIES)
    rows = ["| arm | n | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for arm, of in arm_statistics(results).items():
        n = of[names[0]][2]
        rows.append(f"| {arm} | {n} | "
                    + " | ".join(f"{of[s][0]:.3f} ± {of[s][1]:.3f}" for s in names) + " |")
    rows += ["", "| summary | arms | gap | 2 × larger std | beyond the noise |",
             "|---|---|---|---|---|"]
    rows += [f"| {name} | {b} − {a} | {gap:+.3f} | {noise:.3f} | "
             f"{'yes' if abs(gap) > noise else 'no'} |" for name, a, b, gap, noise in gaps(results)]
    return "\n".join(rows)


def plot_study(results: Results) -> Figure:
    """One panel per summary: each seed's number (a dot) and each arm's mean ± std (a bar)."""
    with matplotlib.rc_context(COURSE_STYLE):
        figure = Figure(figsize=(4.2 * len(SUMMARIES), 3.8), layout="constrained")
        axes = figure.subplots(1, len(SUMMARIES))
        numbers = {arm: [run_numbers(records) for records in runs.values()]
                   for arm, runs in results.items()}
        of = arm_statistics(results)
        for axis, name in zip(axes, SUMMARIES):
            for x, arm in enumerate(results):
                axis.plot([x] * len(numbers[arm]), [n[name] for n in numbers[arm]], "o",
                          color=f"C{x}", alpha=0.6)
                axis.errorbar([x + 0.15], [of[arm][name][0]], yerr=[of[arm][name][1]], fmt="s",
                              color=f"C{x}", capsize=4)
            axis.set_xticks(range(len(results)), list(results), rotation=15)
            axis.set_title(name)
            axis.set_ylabel(name)
            axis.grid(alpha=0.3)
        figure.suptitle("dots: one seed each; squares: mean ± std over the seeds")
    return figure


def _parser() -> Parser:
    parser = Parser(prog="python -m course.lab.study", description=__doc__.split("\n\n")[0])
    parser.add_argument("--knob", required=True, choices=MENU, help="the one thing the arms vary")
    parser.add_argument("--values", nargs="+", required=True, metavar="VALUE",
                        help="2 or 3 values of the knob, one arm each")
    parser.add_argument("--seeds", type=flag_types()["seed"], nargs="+", default=[0, 1, 2],
                        help=f"seeds of every arm, each once, at least {MIN_SEEDS}")
    positive = flag_type(int, lambda value: out_of_range(value, 1, True))
    parser.add_argument("--steps", type=positive, default=30, help="steps of each run")
    parser.add_argument("--eval-problems", type=positive, default=HEALTHY.eval_problems,
                        help="held-out problems scored after each run")
    parser.add_argument("--budget", type=flag_type(float, lambda v: out_of_range(v, 0, False)),
                        default=BUDGET_S, help="seconds the study may take (estimated)")
    parser.add_argument("--estimate", action="store_true", help="print the cost, train nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        values = [MENU[args.knob].kind(v) for v in args.values]
    except ValueError:
        parser.error(f"argument --values: {args.knob} takes {MENU[args.knob].kind.__name__} "
                     f"values, got {' '.join(args.values)}")
    refuse_repeats(parser, {"--values": values, "--seeds": args.seeds})
    try:
        study = Study(args.knob, values, args.seeds, args.steps, args.eval_problems)
    except ValueError as error:  # "seeds must ...", "values: lr must ...": the flag, then why
        field, _, why = str(error).partition(" ")
        parser.error(f"argument --{field.rstrip(':').replace('_', '-')}: {why}")
    if args.estimate or (problem := budget_problem(study, args.budget)):
        print(f"estimated {estimate_seconds(study) / 60:.1f} min for "
              f"{len(values) * len(args.seeds)} runs of {args.steps} steps")
        if not args.estimate:
            parser.error(f"argument --budget: refused: {problem}")
        return 0
    from transformers.utils import logging as transformers_logging  # after the checks: slow

    transformers_logging.disable_progress_bar()  # a progress line per run, no bar per load
    results: Results = {}
    try:
        run_study(study, budget_s=args.budget, results=results)
    except KeyboardInterrupt:
        whole = sum(len(runs) for runs in results.values())
        print(f"interrupted (Ctrl-C) after {whole} of {len(values) * len(args.seeds)} runs: no "
              "table (a mean needs every seed)", file=sys.stderr)
        return INTERRUPTED
    except ValueError as error:
        parser.error(f"argument --values: {error}")
    print("\n" + study_table(results))
    return 0


if __name__ == "__main__":
    command(main, "no table")
