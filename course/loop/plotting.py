"""Training curves of a GRPO run, from the records `course.train` writes to `metrics.jsonl`.

One figure, six panels: the rollouts' reward (answer and format), held-out accuracy (sampled at
temperature 1 and greedy, with the warm start at step 0), token entropy, KL to the warm start,
clip fraction and gradient norm. It draws on a bare `matplotlib.figure.Figure` (no pyplot), so it
needs no display and leaves a notebook's inline backend alone. `COURSE_STYLE` is the text size of
every plot in the course, this figure and the notebooks' (`use_course_style()`): 10 pt and up.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

COURSE_STYLE = {
    "font.size": 11,
    "axes.titlesize": 11,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "figure.titlesize": 12,
}

# (title, y-axis label, metric keys)
PANELS = (
    ("rollout reward", "mean reward", ("answer_reward_mean", "format_reward_mean")),
    ("held-out accuracy", "fraction correct", ("heldout_accuracy_sampled",
                                               "heldout_accuracy_greedy")),
    ("token entropy", "nats per token", ("token_entropy",)),
    ("KL to warm start (k3)", "nats per token", ("kl_to_reference",)),
    ("clip fraction", "fraction of tokens", ("clip_fraction",)),
    ("gradient norm (before clipping)", "L2 norm", ("gradient_norm",)),
)
# Why a flat clip-fraction panel is not a bug: with one optimizer step per rollout batch the policy
# that is trained is the one that sampled, so every ratio is 1 and nothing is clipped.
FLAT_CLIP_NOTE = (
    "0 throughout: one update per rollout,\nso every ratio r = 1 (try --updates-per-rollout 4)"
)


def use_course_style() -> None:
    """Set pyplot's defaults to the course's text sizes (10 pt and up); call once per notebook."""
    matplotlib.rcParams.update(COURSE_STYLE)


def slider(draw, **controls) -> None:
    """Show ipywidgets `controls` under the static figure a notebook has just drawn; moving one
    redraws `draw(**values)` below it.

    Nothing is drawn until a control moves, so a headless run (nbclient, nbgrader, nbconvert)
    executes no widget callback and an HTML export keeps the static figure as the fallback.
    """
    from IPython.display import display
    from ipywidgets import Output, VBox

    output = Output()

    def redraw(_change=None) -> None:
        with output:
            output.clear_output(wait=True)
            draw(**{name: control.value for name, control in controls.items()})

    for control in controls.values():
        control.observe(redraw, names="value")
    display(VBox([*controls.values(), output]))


def read_metrics(path: str | Path) -> list[dict]:
    """The records of a `metrics.jsonl` file, in order."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_training_curves(records: list[dict], before: dict | None, path: str | Path) -> Path:
    """Save the six-panel figure to `path` (PNG); `before` adds step-0 held-out accuracies."""
    with matplotlib.rc_context(COURSE_STYLE):
        figure = _training_curves(records, before)
        path = Path(path)
        figure.savefig(path, dpi=100)
    return path


def _training_curves(records: list[dict], before: dict | None) -> Figure:
    figure = Figure(figsize=(14, 7.5), layout="constrained")
    axes = figure.subplots(2, 3)
    for axis, (title, ylabel, keys) in zip(axes.flat, PANELS):
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
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
        if len(keys) > 1:
            axis.legend()
        if keys == ("clip_fraction",) and points and max(value for _, value in points) == 0:
            axis.text(0.5, 0.5, FLAT_CLIP_NOTE, transform=axis.transAxes, ha="center", va="center")
    return figure


# (title, metric key) of each panel of the failure-mode lab: what to watch in a run
WATCH = (
    ("rollout reward", "reward_mean"),
    ("KL to warm start (k3)", "kl_to_reference"),
    ("gradient norm (before clipping)", "gradient_norm"),
    ("response length (tokens)", "response_length"),
    ("groups with signal (rewards not all equal)", "groups_with_signal"),
    ("format rate", "format_reward_mean"),
)


def failure_panel(records: list[dict], healthy: list[dict], label: str,
                  healthy_label: str = "healthy",
                  also: dict[str, list[dict]] | None = None) -> Figure:
    """The six `WATCH` metrics per step of the run `records` (named `label`) beside the healthy run
    (or another run to compare with, named `healthy_label`), dashed, and the runs of `also` (name:
    records), dotted (the lab's repair: the repaired rerun beside the broken and healthy runs)."""
    runs = [(healthy, healthy_label, "--"), *((run, name, ":") for name, run in (also
                                                                                 or {}).items()),
            (records, label, "-")]
    with matplotlib.rc_context(COURSE_STYLE):
        figure = Figure(figsize=(14, 6.5), layout="constrained")
        for axis, (title, key) in zip(figure.subplots(2, 3).flat, WATCH):
            for run, name, style in runs:
                axis.plot([r["step"] for r in run], [r[key] for r in run], style, label=name)
            axis.set_title(title)
            axis.set_xlabel("step")
            axis.grid(alpha=0.3)
            if key == "kl_to_reference":  # from 1e-13 at step 1 to above 1: a log scale shows both
                axis.set_yscale("symlog", linthresh=1e-3)
        axis.legend()
    return figure
