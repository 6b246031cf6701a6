"""Recorded GRPO runs that go wrong: the failure-mode lab of notebook 07.

    python -m course.failure_runs                 # writes course/checkpoints/failure_runs/*.json
    python -m course.failure_runs --out DIR --steps 2 --runs healthy

Each run is `course.train` on the tiny default model (CPU, seed 0, 8 x 8 rollouts per step) with
one option changed from the healthy run; the per-step metrics of `metrics.jsonl` it keeps
(`KEPT`, floats rounded to 4 significant digits, one column per metric) go to one small JSON file
per run (about 4 KB). The lab reads
these files offline, so it neither trains nor needs the reference stages.

Not recorded, because `course.train` has no option for them: per-micro-batch normalization (the
bug of notebook 05 only shows with uneven token counts over several micro-batches, and the
reference has no switch for it) and a hackable reward (the task's reward is fixed).
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import replace
from pathlib import Path

from course.cli import Parser, flag_type, out_of_range
from course.train_config import TrainConfig

RECORDED = Path(__file__).parent / "checkpoints" / "failure_runs"
HEALTHY = TrainConfig(steps=50, eval_every=25, eval_problems=100, eval_samples=1, seed=0, device="cpu")
# name: the options that differ from HEALTHY
RUNS = {
    "healthy": {},
    "high_lr": {"lr": 3e-3},
    "no_baseline": {"baseline": "none", "advantage_normalizer": "none"},
    "kl_strong": {"kl_beta": 1.0},
}
KEPT = ("step", "reward_mean", "format_reward_mean", "kl_to_reference", "gradient_norm",
        "response_length", "groups_with_signal", "token_entropy", "clip_fraction",
        "heldout_accuracy_sampled", "heldout_format_sampled", "heldout_accuracy_greedy")
# the order of the lab's "Run A", "Run B", ... (not the order of RUNS, which names them)
LAB_ORDER = ("kl_strong", "high_lr", "no_baseline")
# what every record holds (the held-out metrics are there every eval_every steps only)
PER_STEP = KEPT[:9]


def rounded(value):
    """`value` to 4 significant digits (ints and the step as they are): a few KB per run."""
    return float(f"{value:.4g}") if isinstance(value, float) else value


def record_run(name: str, steps: int, out: Path, progress: bool = False) -> Path:
    """Train run `name` of `RUNS` for `steps` steps and write its kept metrics to out/NAME.json."""
    from course.train import train  # torch: after the arguments are checked

    config = replace(HEALTHY, steps=steps, **RUNS[name])
    with tempfile.TemporaryDirectory(prefix="grpo_failure_run_") as folder:
        summary = train(config, Path(folder), progress=progress)
        lines = (Path(folder) / "metrics.jsonl").read_text().splitlines()
    path = out / f"{name}.json"
    write_run(path, {"made_by": "python -m course.failure_runs", "name": name, "changed": RUNS[name],
                     "steps": steps, "machine": summary["machine"], "records": list(map(json.loads, lines))})
    return path


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
        raise FileNotFoundError(f"{path}: run {name!r} is not recorded (python -m course.failure_runs)")
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
    parser = Parser(prog="python -m course.failure_runs", description=__doc__.split("\n\n")[0])
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
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"argument --out: {args.out} is not a folder")
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
