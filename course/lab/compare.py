"""The loss variants side by side: notebook 08's experiment, rerunnable from the command line.

    python -m course.lab.compare --out runs/compare                       # 5 losses x 2 normalizations, minutes
    python -m course.lab.compare --out runs/compare --seeds 0 1 2 --steps 300 --eval-every 50   # the full one

Every (pg_method, normalization, seed) is one `course.train` run; everything else is equal, and the
seeds fix the problems and the sampling noise, so two variants differ only by their loss. The losses
are those of `course.losses` (none = REINFORCE with the group baseline; noclip; grpo = PPO clip,
Shao et al. 2024, arXiv 2402.03300; gspo, Zheng et al. 2025, arXiv 2507.18071; cispo, MiniMax 2025,
arXiv 2506.13585), the normalizations those of `course.aggregation` (sequence = GRPO, token = DAPO).
With one update per rollout the policy never leaves its sampler, the importance ratio is 1 and
noclip, grpo and cispo take the same step; the default here is two updates per rollout, so that
the clipping the variants differ by actually acts.

`--out DIR` gets one `course.train` folder per run, and `compare.png` (held-out sampled accuracy
over steps, one curve per variant, mean over seeds, with the table beside it), `compare.md` (the
table) and `compare.json` (every run's numbers and curve). A non-empty DIR is refused unless
`--overwrite`: nothing a student ran before is lost. A Ctrl-C stops at once and says how many runs
are whole. The guards here (`refuse_repeats`, `refuse_missing_extras`, `stop_if_interrupted`,
`command`) are also those of notebook 08's experiments (`course.lab.experiments`).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from course.cli import (
    INTERRUPTED,
    Parser,
    add_config_arguments,
    flag_type,
    out_of_range,
    unwritable,
)
from course.loop.train_config import (
    CHOICES,
    FLAG_ALIASES,
    ConfigError,
    TrainConfig,
    flag_types,
    validate,
)
from course.variants import LOSS_NORMALIZATIONS, PG_METHODS, RUN_PG_METHODS

# Fields of `TrainConfig` that this command sets per run (the others are common flags).
PER_RUN = ("pg_method", "normalization", "seed")
# Short by default: ten runs in a few minutes on a 2-core CPU. `--steps` etc. for the full experiment.
DEFAULTS = dict(steps=60, updates_per_rollout=2, eval_problems=100, eval_samples=2, eval_every=20)
COLUMNS = ("sampled before", "sampled after", "greedy after", "entropy", "KL", "wall s")
STYLES = {"sequence": "-", "token": "--", "constant": ":"}
# TrainConfig fields that need an optional extra: field -> (the module it imports, the extra)
EXTRAS = {"lora_rank": ("peft", "lora")}


def repeats(values) -> list[str]:
    """The values given more than once, as text: a repeated seed is the same run again."""
    values = list(values)
    return sorted({str(v) for v in values if values.count(v) > 1})


def refuse_repeats(parser: Parser, flags: dict) -> None:
    """A usage error naming the first flag (flag -> its values) that repeats a value."""
    for flag, values in flags.items():
        if repeated := repeats(values):
            parser.error(f"argument {flag}: {' '.join(repeated)} given twice; a repeat is the same "
                         "run again, not another sample")


def refuse_missing_extras(parser: Parser, config: TrainConfig) -> None:
    """A usage error naming the flag and the extra, before any run, where `config` asks for what
    an extra that is not installed gives (`--lora-rank` needs peft, the `lora` extra)."""
    for field, (module, extra) in EXTRAS.items():
        if getattr(config, field) and importlib.util.find_spec(module) is None:
            parser.error(f"argument --{field.replace('_', '-')}: needs {module}, which is not "
                         f"installed: it is the `{extra}` extra (pip install -e \".[{extra}]\")")


def stop_if_interrupted(summary: dict) -> dict:
    """`summary`, unless it is that of a run cut short by Ctrl-C (`course.loop.train.train`
    returns one): then KeyboardInterrupt, so that the cut-short run is never taken for a whole one."""
    if summary.get("interrupted"):
        raise KeyboardInterrupt
    return summary


def command(main: Callable[[], int], nothing: str) -> None:
    """Run a command's `main` as `python -m`: a Ctrl-C outside its runs (while torch loads) exits
    INTERRUPTED saying `nothing` (what was not written), never with a traceback."""
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # amid a run, `main` says more
        print(f"interrupted (Ctrl-C): {nothing}", file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None


def run_variants(base: TrainConfig, pg_methods, normalizations, seeds, out: Path, log=print,
                 runs: list[dict] | None = None) -> list[dict]:
    """Train every (pg_method, normalization, seed); one record per run with its held-out curve,
    appended to `runs` as each ends (what a Ctrl-C leaves done)."""
    from course.loop.train import train  # torch: after the command line is checked

    runs = [] if runs is None else runs
    for pg_method in pg_methods:
        for normalization in normalizations:
            for seed in seeds:
                config = replace(base, pg_method=pg_method, normalization=normalization, seed=seed)
                folder = out / f"{pg_method}-{normalization}-seed{seed}"
                summary = stop_if_interrupted(train(config, folder, progress=False))
                records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
                curve = [(0, summary["accuracy_before"])] + [
                    (r["step"], r["heldout_accuracy_sampled"]) for r in records if "heldout_accuracy_sampled" in r]
                runs.append({"pg_method": pg_method, "normalization": normalization, "seed": seed, "curve": curve,
                             "entropy": records[-1]["token_entropy"] if records else float("nan"),
                             "kl": records[-1]["kl_to_reference"] if records else 0.0,
                             **{k: summary[k] for k in ("accuracy_before", "accuracy_after",
                                                        "greedy_accuracy_after", "wall_seconds")}})
                log(f"{pg_method:>6} {normalization:>8} seed {seed}: sampled {summary['accuracy_before']:.3f} -> "
                    f"{summary['accuracy_after']:.3f}, greedy {summary['greedy_accuracy_after']:.3f}, "
                    f"{summary['wall_seconds']:.0f} s")
    return runs


def table(runs: list[dict]) -> list[dict]:
    """One row per (pg_method, normalization): means over seeds, and the mean curve."""
    rows = []
    for key in dict.fromkeys((r["pg_method"], r["normalization"]) for r in runs):
        group = [r for r in runs if (r["pg_method"], r["normalization"]) == key]
        steps = [step for step, _ in group[0]["curve"]]
        rows.append({
            "variant": f"{key[0]} / {key[1]}", "normalization": key[1], "seeds": len(group),
            "curve": [(step, statistics.mean(r["curve"][i][1] for r in group)) for i, step in enumerate(steps)],
            **dict(zip(COLUMNS, (statistics.mean(r[k] for r in group) for k in (
                "accuracy_before", "accuracy_after", "greedy_accuracy_after", "entropy", "kl", "wall_seconds"))))})
    return rows


def _cells(row: dict) -> list[str]:
    return [f"{row[c]:.0f}" if c == "wall s" else f"{row[c]:.3f}" for c in COLUMNS]


def markdown(rows: list[dict]) -> str:
    lines = ["| variant | seeds | " + " | ".join(COLUMNS) + " |", "|---|---|" + "---|" * len(COLUMNS)]
    lines += [f"| {r['variant']} | {r['seeds']} | " + " | ".join(_cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], title: str, path: Path) -> Path:
    """Curves on the left, the table on the right; a bare Figure (no pyplot, no display needed)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(14, 5.5), layout="constrained")
    curves, cells = figure.subplots(1, 2, width_ratios=(1, 1.25))
    for row in rows:
        steps, values = zip(*row["curve"])
        curves.plot(steps, values, STYLES.get(row["normalization"], "-"), marker="o", markersize=3,
                    label=row["variant"])
    curves.set(title=title, xlabel="GRPO step", ylabel="held-out accuracy, sampled at τ = 1")
    curves.grid(alpha=0.3)
    curves.legend(fontsize=8)
    cells.axis("off")
    shown = ("variant",) + COLUMNS
    text = [[row["variant"], *_cells(row)] for row in rows]
    grid = cells.table(cellText=text, colLabels=shown,
                       loc="center", cellLoc="right")
    grid.auto_set_font_size(False)
    grid.set_fontsize(8)
    grid.scale(1, 1.3)
    figure.savefig(path, dpi=100)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course.lab.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/compare"),
                        help="folder for the runs, compare.png, compare.md and compare.json")
    parser.add_argument("--overwrite", action="store_true", help="write into a non-empty --out")
    parser.add_argument("--pg-methods", "--losses", dest="pg_methods", nargs="+", choices=RUN_PG_METHODS,
                        default=list(PG_METHODS), help="the policy-gradient losses to train with "
                        "(--losses: its name before, for one release)")
    parser.add_argument("--normalizations", nargs="+", choices=LOSS_NORMALIZATIONS, default=["sequence", "token"])
    # a run of no steps has no last step to read the entropy and KL of
    types = {**flag_types(), "steps": flag_type(int, lambda value: out_of_range(value, 1, True))}
    parser.add_argument("--seeds", nargs="+", type=types["seed"], default=[0])
    add_config_arguments(parser, TrainConfig, choices=CHOICES, exclude=PER_RUN, types=types,
                         aliases=FLAG_ALIASES)
    parser.set_defaults(**DEFAULTS)
    args = vars(parser.parse_args(argv))
    out, overwrite = args.pop("out"), args.pop("overwrite")
    pg_methods, normalizations, seeds = args.pop("pg_methods"), args.pop("normalizations"), args.pop("seeds")
    refuse_repeats(parser, {"--pg-methods": pg_methods, "--normalizations": normalizations,
                            "--seeds": seeds})
    base = TrainConfig(**args)
    try:
        validate(base, world_size=1)
    except ConfigError as error:
        parser.error(f"argument --{error.field.replace('_', '-')}: {error.message}")
    refuse_missing_extras(parser, base)
    if problem := unwritable(out):
        parser.error(f"argument --out: {problem}")
    if out.exists() and any(out.iterdir()) and not overwrite:
        parser.error(f"argument --out: {out} is not empty; choose another folder or pass --overwrite")
    out.mkdir(parents=True, exist_ok=True)

    runs: list[dict] = []
    try:
        run_variants(base, pg_methods, normalizations, seeds, out, runs=runs)
    except KeyboardInterrupt:
        total = len(pg_methods) * len(normalizations) * len(seeds)
        print(f"interrupted (Ctrl-C) after {len(runs)} of {total} runs: their folders in {out} are "
              "whole, the next one's partial; no compare.md, .json or .png", file=sys.stderr)
        return INTERRUPTED
    rows = table(runs)
    title = (f"{base.steps} steps, {base.prompts_per_step}x{base.group_size} rollouts, lr {base.lr:g}, "
             f"{base.updates_per_rollout} updates/rollout, seeds {' '.join(map(str, seeds))}")
    (out / "compare.md").write_text(f"{title}\n\n{markdown(rows)}")
    (out / "compare.json").write_text(json.dumps({"config": asdict(base), "seeds": seeds, "rows": rows}, indent=1))
    plot(rows, title, out / "compare.png")
    print(f"\n{title}\n\n{markdown(rows)}\nwrote {out / 'compare.png'}")
    return 0


if __name__ == "__main__":
    command(main, "no compare.md, .json or .png")
