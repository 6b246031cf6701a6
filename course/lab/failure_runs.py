"""Recorded GRPO runs that go wrong: the failure-mode lab of notebook 08.

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
"""

from __future__ import annotations

import json
import math
import tempfile
import types
from dataclasses import replace
from pathlib import Path

from course.cli import Parser, flag_type, out_of_range, unwritable
from course.loop.tasks import RESPONSE_PATTERN, AdditionTask, r1_zero_reward_fn
from course.loop.train_config import TrainConfig
from course.paths import CHECKPOINTS

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
# the order of the lab's "Run A", "Run B", ... (not the order of RUNS, which names them)
LAB_ORDER = ("kl_strong", "high_lr", "no_baseline", "hackable_reward", "per_micro_batch")
# what every record holds (the held-out metrics are there every eval_every steps only)
PER_STEP = KEPT[:9]


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


def record_run(name: str, steps: int, out: Path, progress: bool = False) -> Path:
    """Train run `name` of `RUNS` for `steps` steps and write its kept metrics to out/NAME.json."""
    from course.loop.train import train  # torch: after the arguments are checked
    from course.submissions.implementations import Implementations

    config = replace(HEALTHY, steps=steps, **RUNS[name])
    counts: list[int] = []
    implementations = None
    if name == "per_micro_batch":
        implementations = Implementations({"grpo_train_step": per_micro_batch_train_step(counts)},
                                          {"grpo_train_step": INJECTED[name]})
    task = LoopholeAddition() if name == "hackable_reward" else None
    with tempfile.TemporaryDirectory(prefix="grpo_failure_run_") as folder:
        summary = train(config, Path(folder), progress=progress, implementations=implementations, task=task)
        lines = (Path(folder) / "metrics.jsonl").read_text().splitlines()
    run = {"made_by": "python -m course.lab.failure_runs", "name": name, "changed": RUNS[name],
           **({"injected": INJECTED[name]} if name in INJECTED else {}),
           "steps": steps, "machine": summary["machine"], "records": list(map(json.loads, lines))}
    if counts:  # K calls per step, one per micro-batch
        k = config.gradient_accumulation_steps
        run["microbatch_tokens"] = [counts[i:i + k] for i in range(0, len(counts), k)]
    path = out / f"{name}.json"
    write_run(path, run)
    return path


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


def lab_runs(folder: str | Path = RECORDED) -> dict[str, dict]:
    """The failure runs under neutral labels, "Run A", "Run B", ..., in `LAB_ORDER`: the lab shows
    a run without its name; `run["name"]` reveals it."""
    return {f"Run {chr(ord('A') + i)}": load_failure_run(name, folder) for i, name in enumerate(LAB_ORDER)}


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
