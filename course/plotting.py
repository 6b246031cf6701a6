"""Training curves of a GRPO run, from the records `course.train` writes to `metrics.jsonl`.

One figure, six panels: the rollouts' reward (answer and format), held-out accuracy (sampled at
temperature 1 and greedy, with the warm start at step 0), token entropy, KL to the warm start,
clip fraction and gradient norm. It draws on a bare `matplotlib.figure.Figure` (no pyplot), so it
needs no display and leaves a notebook's inline backend alone.
"""

from __future__ import annotations

import json
from pathlib import Path

from matplotlib.figure import Figure

PANELS = (
    ("rollout reward", ("answer_reward_mean", "format_reward_mean")),
    ("held-out accuracy", ("heldout_accuracy_sampled", "heldout_accuracy_greedy")),
    ("token entropy (nats)", ("token_entropy",)),
    ("KL to warm start (k3)", ("kl_to_reference",)),
    ("clip fraction", ("clip_fraction",)),
    ("gradient norm (before clipping)", ("gradient_norm",)),
)


def read_metrics(path: str | Path) -> list[dict]:
    """The records of a `metrics.jsonl` file, in order."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_training_curves(records: list[dict], before: dict | None, path: str | Path) -> Path:
    """Save the six-panel figure to `path` (PNG); `before` adds step-0 held-out accuracies."""
    figure = Figure(figsize=(13, 7), layout="constrained")
    axes = figure.subplots(2, 3)
    for axis, (title, keys) in zip(axes.flat, PANELS):
        for key in keys:
            points = [(r["step"], r[key]) for r in records if key in r]
            if before and key in before:
                points.insert(0, (0, before[key]))
            if points:
                steps, values = zip(*points)
                axis.plot(steps, values, marker="o" if len(points) < 30 else None, markersize=3,
                          label=key.replace("_mean", "").replace("heldout_accuracy_", ""))
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
        if len(keys) > 1:
            axis.legend(fontsize=8)
    path = Path(path)
    figure.savefig(path, dpi=100)
    return path
