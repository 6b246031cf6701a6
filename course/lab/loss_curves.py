"""Seven policy-gradient losses on one budget, as recorded: their curves over seeds and the noise.

`benchmarks/bench_loss_curves.py` trains the failure lab's healthy run with each of grpo, dapo,
gspo, cispo, sapo, gmpo and dppo at four optimizer steps per rollout batch (so that the clips,
gates and trust regions they differ by act), seeds 0, 1 and 2, and records every run's held-out
accuracy curve in `RECORDING`. Here is what reads the recording, for the benchmark's table and
figure and for notebook 04: the mean and sample std over seeds at each evaluation (`summary`), the
pairs of losses whose gap after the last step exceeds twice the larger of their two seed stds
(`noise_rule`), and the figure, mean ± one std per loss (`curves_figure`).
"""

from __future__ import annotations

import json
import statistics
from itertools import combinations
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from course.loop.plotting import COURSE_STYLE
from course.paths import CHECKPOINTS

RECORDING = CHECKPOINTS / "loss_curves.json"
# A gap is beyond the seed noise where it exceeds this many of the larger seed std.
NOISE_FACTOR = 2


def load_recording(path: Path = RECORDING) -> dict:
    """The recording `bench_loss_curves.py` wrote: `made_by`, `date`, `machine`, `seeds`,
    `config` and `runs`, one per (loss, seed) with its `curve` of (step, sampled accuracy)."""
    return json.loads(Path(path).read_text())


def spread(values: list[float]) -> tuple[float, float]:
    """(mean, sample std); the std of one value is 0."""
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summary(runs: list[dict]) -> dict[str, dict]:
    """Per loss, in the order of `runs`: the steps, the sampled accuracy's (mean, std) at each,
    the greedy accuracy after, the clip fraction and the number of seeds."""
    rows = {}
    for variant in dict.fromkeys(r["variant"] for r in runs):
        group = [r for r in runs if r["variant"] == variant]
        rows[variant] = {"steps": [step for step, _ in group[0]["curve"]],
                         "sampled": [spread([r["curve"][i][1] for r in group])
                                     for i in range(len(group[0]["curve"]))],
                         "greedy_after": spread([r["greedy_after"] for r in group]),
                         "clip_fraction": spread([r["clip_fraction"] for r in group]),
                         "seeds": len(group)}
    return rows


def noise_rule(rows: dict[str, dict]) -> list[str]:
    """The pairs whose sampled accuracies after the last step differ by more than `NOISE_FACTOR`
    times the larger of their two seed standard deviations, each as 'a − b = gap (2 · std)'."""
    found = []
    for a, b in combinations(rows, 2):
        (mean_a, std_a), (mean_b, std_b) = rows[a]["sampled"][-1], rows[b]["sampled"][-1]
        if abs(mean_a - mean_b) > NOISE_FACTOR * max(std_a, std_b):
            high, low = (a, b) if mean_a > mean_b else (b, a)
            found.append(f"{high} − {low} = {abs(mean_a - mean_b):.3f} "
                         f"({NOISE_FACTOR} · std = {NOISE_FACTOR * max(std_a, std_b):.3f})")
    return found


def curves_figure(rows: dict[str, dict], title: str) -> Figure:
    """Mean curve ± one seed std per loss; a bare Figure (no pyplot, no display needed)."""
    with matplotlib.rc_context(COURSE_STYLE):
        figure = Figure(figsize=(8, 5), layout="constrained")
        axes = figure.subplots()
        for variant, row in rows.items():
            means = [m for m, _ in row["sampled"]]
            stds = [s for _, s in row["sampled"]]
            axes.plot(row["steps"], means, marker="o", markersize=3, label=variant)
            axes.fill_between(row["steps"], [m - s for m, s in zip(means, stds)],
                              [m + s for m, s in zip(means, stds)], alpha=0.12)
        axes.set(title=title, xlabel="rollout batch (4 optimizer steps each)",
                 ylabel="held-out accuracy, sampled at τ = 1")
        axes.grid(alpha=0.3)
        axes.legend(ncol=2)
    return figure
