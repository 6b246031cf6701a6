"""Recorded GRPO runs that go wrong: the failure-mode lab of notebook 09.

    python -m course.lab.failure_runs                 # writes course/checkpoints/failure_runs/*.json
    python -m course.lab.failure_runs --out DIR --steps 2 --runs healthy

Each run is `course.train` on the tiny default model (CPU, seed 0, 8 x 8 rollouts per step) with
one thing changed from the healthy run; the per-step metrics of `metrics.jsonl` it keeps
(`KEPT`, floats rounded to 4 significant digits, one column per metric) go to one small JSON file
per run (4 to 5 KB). The lab reads these files offline, so it neither trains nor needs the
reference stages.

Most runs change `TrainConfig` options (`RUNS`). Two inject what no option sets (`INJECTED`):
- per_micro_batch: notebook 06's gradient-accumulation bug, in the loop's own train step:
  `course.grpo_train_step` with `calculate_loss_and_backward` replaced by each micro-batch's own
  token mean times its share b/B of the rows (1/K for K equal micro-batches), instead of its
  token sum over the step's N. A token of micro-batch k then weighs 1/(K·n_k), not 1/N. The run
  keeps every micro-batch's token count n_k (`microbatch_tokens`), and `token` is the same run
  without the bug.
- hackable_reward: a reward with a loophole (`loophole_reward_fn`): it pays for the right answer
  and for any longer answer, while the held-out accuracy stays the strict r1-zero answer check.

The lab shows each run under a letter, without its name, beside its control (`lab_runs`,
`control_of`). Its answers: `LABELS` (with `DISTRACTORS`, the `CHOICES`) and `SIGNATURE_PANELS`,
which `check_guess` checks against; `reveal` maps a letter to its run; `rerun` trains a run again
with an option changed (the repair's learning-rate search, `course.lab.lr_search`).
"""

from __future__ import annotations

import json
import math
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from course.cli import Parser, flag_type, out_of_range, unwritable
from course.loop.tasks import RESPONSE_PATTERN, AdditionTask, r1_zero_reward_fn
from course.loop.train_config import TrainConfig
from course.paths import CHECKPOINTS

T = TypeVar("T")
RECORDED = CHECKPOINTS / "failure_runs"
HEALTHY = TrainConfig(steps=50, eval_every=25, eval_problems=100, eval_samples=1, seed=0, device="cpu")
# name: the options that differ from HEALTHY
RUNS = {
    "healthy": {},
    "high_lr": {"lr": 3e-3},
    "no_baseline": {"baseline": "none", "advantage_normalizer": "none"},
    "kl_strong": {"kl_beta": 1.0},
    "token": {"normalization": "token", "gradient_accumulation_steps": 8},  # DAPO's, done right
    "per_micro_batch": {"normalization": "token", "gradient_accumulation_steps": 8},
    "hackable_reward": {},
}
# name: what the run injects that no TrainConfig option sets (see the module docstring)
INJECTED = {
    "per_micro_batch": "each micro-batch divided by its own token count, times its share b/B of the rows",
    "hackable_reward": "a reward that also pays for any answer longer than the right one",
}
KEPT = ("step", "reward_mean", "format_reward_mean", "kl_to_reference", "gradient_norm",
        "response_length", "groups_with_signal", "token_entropy", "clip_fraction",
        "heldout_accuracy_sampled", "heldout_format_sampled", "heldout_accuracy_greedy")
# the runs behind the lab's "Run A", "Run B", ... (not the order of RUNS, which names them)
LAB_ORDER = ("kl_strong", "high_lr", "no_baseline", "hackable_reward", "per_micro_batch")
LETTERS = tuple(chr(ord("A") + i) for i in range(len(LAB_ORDER)))
# what every record holds (the held-out metrics are there every eval_every steps only)
PER_STEP = KEPT[:9]
# name: the lab's label for it
LABELS = {"high_lr": "too high a learning rate", "no_baseline": "no baseline", "kl_strong": "KL too strong",
          "hackable_reward": "a hackable reward", "per_micro_batch": "per-micro-batch normalization"}
# labels that no lab run is, each a failure with a signature these panels would show (so a run
# can be told from it): with them, elimination does not name the last run
DISTRACTORS = (
    "entropy collapse from too low a temperature",  # groups with signal fall: G samples agree
    "too low a learning rate",  # KL to the warm start far below the healthy run's, gradient not
    "rewards all equal (no signal)",  # groups with signal 0 from step 1, every gradient norm 0
)
# sorted: an order taken from LAB_ORDER would give the answers away
CHOICES = tuple(sorted([*LABELS.values(), *DISTRACTORS]))
# the short name of each panel of `course.loop.plotting.WATCH` (in its order, each the start of its
# title): the `signature` numbers it draws
PANELS = {"rollout reward": ("reward first 5", "reward last 10"),
          "KL to warm start": ("KL mean", "KL max"),
          "gradient norm": ("gradient norm max", "steps with gradient 0"),
          "response length": ("length min", "length max"),
          "groups with signal": ("groups with signal (mean)",),
          "format rate": ("format rate min",)}
NO_PANEL = "none"  # the answer for a run that no panel tells apart
# the run each lab run is drawn beside and checked against, where not the healthy run: the bug
# against the same run without it (the healthy run differs from it in two options besides the bug)
CONTROLS = {"per_micro_batch": "token"}
# a panel shows a run's signature where one of its numbers differs from the compared run's by more
# than this fraction of the larger: no_baseline's reward over the last 10 steps (0.35 against
# 0.355) is noise, kl_strong's mean KL (0.0274 against 0.0766) is not
VISIBLE = 0.3
# name: the panels that show its signature (`visible_panels` on the recordings, held by
# tests/test_failure_runs.py), or NO_PANEL
SIGNATURE_PANELS = {
    "kl_strong": ("KL to warm start", "gradient norm"),
    "high_lr": tuple(PANELS),
    "no_baseline": ("gradient norm",),
    "hackable_reward": ("rollout reward", "KL to warm start", "response length", "format rate"),
    "per_micro_batch": (NO_PANEL,),
}
# the steps of one probe of the lab's repair (`rerun`): Run B's reward and format rate are 0 from
# step 2 on, so 10 steps show whether a rate holds, in 7 to 13 s of CPU (benchmarks/README.md)
REPAIR_STEPS = 10


@dataclass(frozen=True)
class MysteryRun:
    """A lab run as the student sees it before the reveal: its letter, its records and its
    control's (`control_of`), and no name (`reveal` maps the letter to the recorded run)."""
    letter: str
    records: list[dict] = field(repr=False)
    control: list[dict] = field(repr=False)


def control_of(name: str) -> str:
    """The recorded run that lab run `name` is drawn beside and checked against."""
    return CONTROLS.get(name, "healthy")


def rounded(value):
    """`value` to 4 significant digits (ints and the step as they are): a few KB per run."""
    return float(f"{value:.4g}") if isinstance(value, float) else value


def loophole_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """r1-zero's scores (`course.loop.tasks`) with a loophole in `reward`: 1 for the right answer, and
    also for any answer in the format that is longer than the right one. `format_reward` and
    `answer_reward` stay r1-zero's, so the answer accuracy (held out too) is still the strict one."""
    scores = r1_zero_reward_fn(response, ground_truth)
    match = RESPONSE_PATTERN.match(response)
    longer = match is not None and len(match.group("answer").strip()) > len(ground_truth.strip())
    return {**scores, "reward": max(scores["reward"], float(longer))}


class LoopholeAddition(AdditionTask):
    """The addition task, trained on `loophole_reward_fn`."""

    name = "addition, rewarded with a loophole"
    reward_fn = staticmethod(loophole_reward_fn)


def per_micro_batch_train_step(counts: list[int] | None = None):
    """`course.grpo_train_step` with notebook 06's bug: the same code, with each micro-batch's
    loss its own token mean (`aggregate_loss_across_microbatch` without the step's count) times
    its share b/B of the step's rows, for token normalization only. `counts` collects each
    micro-batch's token count n_k, in the order of the calls."""
    from course.aggregation import aggregate_loss_across_microbatch
    from course.train_step import grpo_train_step

    def backward(per_token_loss, response_mask, loss_normalization, step_sequence_count,
                 step_token_count, normalization_constant=None, world_size=1):
        if loss_normalization != "token":
            raise ValueError(f"loss_normalization: the per-micro-batch bug is token mode's, got {loss_normalization!r}")
        if counts is not None:
            counts.append(int(response_mask.sum()))
        share = per_token_loss.shape[0] / float(step_sequence_count)  # b/B
        loss = aggregate_loss_across_microbatch(per_token_loss, response_mask, "token") * share * world_size
        loss.backward()
        return loss.detach()

    namespace = {**grpo_train_step.__globals__, "calculate_loss_and_backward": backward}
    return types.FunctionType(grpo_train_step.__code__, namespace, grpo_train_step.__name__,
                              grpo_train_step.__defaults__, grpo_train_step.__closure__)


def trained_records(name: str, config: TrainConfig, counts: list[int] | None = None,
                    progress: bool = False, task=None, implementations=None) -> tuple[list[dict], dict]:
    """Train run `name` of `RUNS` (with what `INJECTED` says it injects) under `config`: its
    metrics.jsonl records and its summary. `counts` collects per_micro_batch's token counts;
    `task` replaces the run's task (the reward exercise's reward); `implementations` whose stages
    train (default: the reference's; the written experiments pass the learner's)."""
    from course.loop.train import train  # torch: after the arguments are checked
    from course.submissions.implementations import Implementations

    if name == "per_micro_batch":
        implementations = Implementations({"grpo_train_step": per_micro_batch_train_step(counts)},
                                          {"grpo_train_step": INJECTED[name]})
    if task is None and name == "hackable_reward":
        task = LoopholeAddition()
    with tempfile.TemporaryDirectory(prefix="grpo_failure_run_") as folder:
        summary = train(config, Path(folder), progress=progress, implementations=implementations, task=task)
        lines = (Path(folder) / "metrics.jsonl").read_text().splitlines()
    return list(map(json.loads, lines)), summary


def record_run(name: str, steps: int, out: Path, progress: bool = False) -> Path:
    """Train run `name` of `RUNS` for `steps` steps and write its kept metrics to out/NAME.json."""
    config = replace(HEALTHY, steps=steps, **RUNS[name])
    counts: list[int] = []
    records, summary = trained_records(name, config, counts, progress)
    run = {"made_by": "python -m course.lab.failure_runs", "name": name, "changed": RUNS[name],
           **({"injected": INJECTED[name]} if name in INJECTED else {}),
           "steps": steps, "machine": summary["machine"], "records": records}
    if counts:  # K calls per step, one per micro-batch
        k = config.gradient_accumulation_steps
        run["microbatch_tokens"] = [counts[i:i + k] for i in range(0, len(counts), k)]
    path = out / f"{name}.json"
    write_run(path, run)
    return path


def rerun(name: str, steps: int = REPAIR_STEPS, implementations=None,
          **changed) -> tuple[list[dict], dict]:
    """Run `name` of `RUNS` again on the CPU for `steps` steps, with the options in `changed` on
    top of its own (e.g. `lr=1e-4`), seed 0 as recorded, on `implementations`' stages (default:
    the reference's): its records, as `load_failure_run`'s, and its summary (the held-out accuracy
    before the first step and after the last)."""
    unknown = [key for key in changed if not hasattr(HEALTHY, key)]
    if unknown:
        raise ValueError(f"not TrainConfig options: {', '.join(unknown)}")
    # why eval_every=steps: train() evaluates after the last step anyway; one evaluation, not two
    config = replace(HEALTHY, **{**RUNS[name], **changed}, steps=steps, eval_every=steps)
    records, summary = trained_records(name, config, implementations=implementations)
    return [{key: rounded(record[key]) for key in KEPT if key in record} for record in records], summary


def bug_weights(microbatch_tokens: list[list[int]]) -> tuple[float, float]:
    """The least and the largest weight the per-micro-batch bug gives a token, as a multiple of
    the right weight 1/N: N/(K·n_k) over every micro-batch k of every step (n_k its tokens; one
    without tokens has no loss to weigh)."""
    ratios = [sum(counts) / (len(counts) * n) for counts in microbatch_tokens for n in counts if n]
    return min(ratios), max(ratios)


def write_run(path: Path, run: dict) -> None:
    """`run` to `path` with its records as columns (one list per kept metric, null at the steps
    without it, 4 significant digits): the metric names once, not once per step."""
    columns = {key: [rounded(r[key]) if key in r else None for r in run["records"]]
               for key in KEPT if any(key in r for r in run["records"])}
    stored = {k: v for k, v in run.items() if k != "records"} | {"metrics": columns}
    path.write_text(json.dumps(stored, separators=(",", ":")) + "\n", encoding="utf-8")


def load_failure_run(name: str, folder: str | Path = RECORDED) -> dict:
    """The recorded run `name` (see `RUNS`). Raises FileNotFoundError naming the file where it is
    not recorded, ValueError naming the metrics a record lacks."""
    path = Path(folder) / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: run {name!r} is not recorded (python -m course.lab.failure_runs)")
    run = json.loads(path.read_text(encoding="utf-8"))
    columns = run.pop("metrics")
    run["records"] = [{key: column[i] for key, column in columns.items() if column[i] is not None}
                      for i in range(len(columns["step"]))]
    for record in run["records"]:
        if missing := [key for key in PER_STEP if key not in record]:
            raise ValueError(f"{path}: step {record.get('step')} lacks {', '.join(missing)}")
    return run


def lab_runs(folder: str | Path = RECORDED) -> dict[str, MysteryRun]:
    """The failure runs under neutral labels, "Run A", "Run B", ..., in `LAB_ORDER`, each with its
    control's records and without its name (`reveal` gives the recorded run)."""
    return {f"Run {letter}": MysteryRun(letter, load_failure_run(name, folder)["records"],
                                        load_failure_run(control_of(name), folder)["records"])
            for letter, name in zip(LETTERS, LAB_ORDER)}


def reveal(letter: str, folder: str | Path = RECORDED) -> dict:
    """The recorded run behind "Run `letter`" (`load_failure_run`'s: its name, what it changed,
    its records)."""
    if letter not in LETTERS:
        raise ValueError(f"letter: expected one of {', '.join(LETTERS)}, got {letter!r}")
    return load_failure_run(LAB_ORDER[LETTERS.index(letter)], folder)


def signature(records: list[dict]) -> dict[str, float]:
    """The numbers that tell the runs apart: reward early (first 5 steps) and late (last 10), the
    mean and largest KL, the largest gradient norm and the steps where it is exactly 0, the
    response-length range, the mean fraction of groups with signal, the lowest format rate, and
    the last held-out accuracy (sampled; nan where none was measured)."""
    def values(key):
        return [r[key] for r in records]
    held_out = [r["heldout_accuracy_sampled"] for r in records if "heldout_accuracy_sampled" in r]
    return {"reward first 5": sum(values("reward_mean")[:5]) / len(records[:5]),
            "reward last 10": sum(values("reward_mean")[-10:]) / len(records[-10:]),
            "KL mean": sum(values("kl_to_reference")) / len(records),
            "KL max": max(values("kl_to_reference")),
            "gradient norm max": max(values("gradient_norm")),
            "steps with gradient 0": sum(v == 0 for v in values("gradient_norm")),
            "length min": min(values("response_length")),
            "length max": max(values("response_length")),
            "groups with signal (mean)": sum(values("groups_with_signal")) / len(records),
            "format rate min": min(values("format_reward_mean")),
            "held-out accuracy, end": held_out[-1] if held_out else math.nan}


def signature_table(runs: dict[str, list[dict]]) -> str:
    """The `signature` numbers of each run of `runs` (name: records), a column per run."""
    rows = {name: signature(records) for name, records in runs.items()}
    lines = [f"{'':27}" + "".join(f"{name:>9}" for name in rows)]
    for key in next(iter(rows.values())):
        lines.append(f"{key:27}" + "".join(f"{row[key]:>9.3g}" for row in rows.values()))
    return "\n".join(lines)


def visible_panels(records: list[dict], compared: list[dict], fraction: float = VISIBLE) -> tuple[str, ...]:
    """The `PANELS` on which the run `records` differs from the run `compared`: where one of the
    panel's `signature` numbers differs by more than `fraction` of the larger of the two."""
    ours, theirs = signature(records), signature(compared)

    def differs(key: str) -> bool:
        return abs(ours[key] - theirs[key]) > fraction * max(abs(ours[key]), abs(theirs[key]))
    return tuple(panel for panel, keys in PANELS.items() if any(map(differs, keys)))


def label_verdict(name: str, guess: str | None, variable: str) -> str:
    """One line on the guess `guess` (the value of `variable`) for the lab run `name`: how to answer
    where it is None or not one of `CHOICES`, else right or wrong."""
    if guess is None:
        return f"no guess yet: set {variable} to one of CHOICES (print(CHOICES) lists them)"
    if guess not in CHOICES:
        return f"{guess!r} is not one of CHOICES: {', '.join(map(repr, CHOICES))}"
    if guess == LABELS[name]:
        return f"right: {guess!r}"
    return f"wrong: {guess!r}; look again at the panels, then read the reveal below"


def panel_verdict(name: str, panel: str | None, variable: str) -> str:
    """One line on the panel `panel` (the value of `variable`) said to show the lab run `name`'s
    failure: how to answer where it is None or not one of `PANELS` or `NO_PANEL`, else whether it
    is one of `SIGNATURE_PANELS[name]`."""
    allowed = (*PANELS, NO_PANEL)
    if panel is None:
        return f"no panel yet: set {variable} to one of PANELS (or {NO_PANEL!r})"
    if panel not in allowed:
        return f"{panel!r} is not one of PANELS: {', '.join(map(repr, allowed))}"
    if panel in SIGNATURE_PANELS[name]:
        return f"right: {panel!r} shows it"
    # why name them: the student learns where to look, and the reveal says why
    return f"wrong: {panel!r} does not; it shows in {', '.join(map(repr, SIGNATURE_PANELS[name]))}"


def check_guess(letter: str, guess: str | None, panel: str | None,
                folder: str | Path = RECORDED) -> str:
    """The lab's check of "Run `letter`" of `lab_runs`: the label guessed and the panel that told
    it, each right or wrong, or how to answer (the variables guess_<letter> and panel_<letter>);
    then the run's name, what it changed, and the run it was checked against."""
    run = reveal(letter, folder)
    suffix = letter.lower()
    changed = ", ".join([*(f"{key}={value!r}" for key, value in run["changed"].items()),
                         *([run["injected"]] if "injected" in run else [])])
    return "\n".join([f"label: {label_verdict(run['name'], guess, f'guess_{suffix}')}",
                      f"panel: {panel_verdict(run['name'], panel, f'panel_{suffix}')}",
                      f"Run {letter} is {run['name']}: {changed} ({LABELS[run['name']]}); "
                      f"checked against {control_of(run['name'])!r}"])


def answer_or_none(answer: Callable[[], T]) -> T | None:
    """`answer()`, or None while it is the release's stub (raises NotImplementedError): a cell that
    uses an unwritten answer says how to answer instead of failing, so the notebook runs headless."""
    try:
        return answer()
    except NotImplementedError:
        return None


def run_names(text: str) -> list[str]:
    """`--runs a,b`: names of `RUNS`, each once."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if unknown := [name for name in names if name not in RUNS]:
        raise ValueError(f"unknown run(s) {', '.join(unknown)}; the runs are {', '.join(RUNS)}")
    if not names or len(set(names)) < len(names):
        raise ValueError(f"expected distinct names among {', '.join(RUNS)}, got {text!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course.lab.failure_runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RECORDED, help=f"folder for the runs (default: {RECORDED})")
    parser.add_argument("--steps", type=flag_type(int, lambda v: out_of_range(v, 1, True)),
                        default=HEALTHY.steps, help=f"steps per run (default: {HEALTHY.steps})")
    parser.add_argument("--runs", type=flag_type(str, lambda v: None), default=",".join(RUNS),
                        help=f"comma-separated runs to record (default: all: {','.join(RUNS)})")
    parser.add_argument("--force", action="store_true", help="overwrite runs recorded in --out")
    args = parser.parse_args(argv)
    try:
        names = run_names(args.runs)
    except ValueError as error:
        parser.error(f"argument --runs: {error}")
    if problem := unwritable(args.out):
        parser.error(f"argument --out: {problem}")
    existing = [str(args.out / f"{name}.json") for name in names if (args.out / f"{name}.json").exists()]
    if existing and not args.force:
        parser.error(f"argument --out: {', '.join(existing)} exist already; pass --force to overwrite them")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = record_run(name, args.steps, args.out)
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
