"""course.lab.loss_curves: the spread over seeds and the noise rule on hand-worked runs, and the
figure notebook 04 draws from the recording."""

from __future__ import annotations

import pytest

from course.lab.loss_curves import curves_figure, load_recording, noise_rule, summary


def runs_of(variant: str, finals: list[float]) -> list[dict]:
    return [{"variant": variant, "seed": seed, "curve": [[0, 0.2], [4, final]],
             "greedy_after": final, "clip_fraction": 0.1} for seed, final in enumerate(finals)]


# after the last step: a 0.3 ± 0.1, b 0.05 ± 0, c 0.14 ± 0.02 (sample stds)
RUNS = runs_of("a", [0.2, 0.3, 0.4]) + runs_of("b", [0.05] * 3) + runs_of("c", [0.12, 0.14, 0.16])


def test_the_spread_is_the_mean_and_sample_std_over_seeds():
    rows = summary(RUNS)
    assert list(rows) == ["a", "b", "c"] and rows["a"]["steps"] == [0, 4]
    assert rows["a"]["sampled"][0] == (0.2, 0.0) and rows["a"]["seeds"] == 3
    mean, std = rows["a"]["sampled"][-1]
    assert mean == pytest.approx(0.3) and std == pytest.approx(0.1)  # not the population 0.0816
    assert summary(runs_of("d", [0.5]))["d"]["sampled"][-1] == (0.5, 0.0)  # one seed: no noise


def test_a_gap_counts_only_beyond_twice_the_larger_seed_std():
    # a − b = 0.25 > 2 · 0.1; c − b = 0.09 > 2 · 0.02; a − c = 0.16 < 2 · 0.1 (the smaller std's
    # 0.04, or once the larger std's 0.1, would let it through)
    assert noise_rule(summary(RUNS)) == ["a − b = 0.250 (2 · std = 0.200)",
                                         "c − b = 0.090 (2 · std = 0.040)"]


def test_the_figure_draws_every_loss_of_the_recording_with_its_band():
    recording = load_recording()
    rows = summary(recording["runs"])
    figure = curves_figure(rows, "title")
    (axes,) = figure.axes
    assert [line.get_label() for line in axes.lines] == list(rows) and len(rows) == 7
    assert len(axes.collections) == 7 and axes.get_ylabel()
