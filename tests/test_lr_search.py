"""course.lab.lr_search: notebook 09's repair of Run B, a bisection for the largest learning rate
that still learns; each probe recorded, checked, and refused where it cannot be checked."""

import math

import pytest

from course.lab.failure_runs import HEALTHY, REPAIR_STEPS, RUNS
from course.lab.lr_search import (
    SEARCH_PROBES,
    START,
    LearningRateSearch,
    Probe,
    learns,
    train_probe,
)


def fake_train(edge: float, before: float = 0.21):
    """A stand-in for training: a rate up to `edge` ends at 0.3, above it at 0.05; it records
    every rate it was asked to train."""
    asked = []

    def train(lr: float) -> Probe:
        asked.append(lr)
        return Probe(lr, [{"step": 1, "lr": lr}], before, 0.3 if lr <= edge else 0.05)
    return train, asked


def test_the_search_starts_from_the_healthy_run_and_run_b():
    assert START == (HEALTHY.lr, RUNS["high_lr"]["lr"]) == (1e-4, 3e-3)
    assert 30 ** (1 / 2 ** SEARCH_PROBES) == pytest.approx(1.237, abs=1e-3)


def test_the_verdict_by_hand():
    assert learns(0.21, 0.21) and learns(0.21, 0.27)  # not worse than the warm start
    assert not learns(0.21, 0.20) and not learns(0.21, 0.0)


def test_bisection_narrows_the_bracket_to_the_edge():
    """With the edge at 2e-4: geometric means 5.48e-4 (fails), 2.34e-4 (fails), 1.53e-4 (learns),
    1.89e-4 (learns), by hand; every probe recorded in order, with its verdict."""
    train, asked = fake_train(edge=2e-4)
    search = LearningRateSearch(train=train)
    for _ in range(SEARCH_PROBES):
        search.probe(math.sqrt(search.learns_at * search.fails_at))
    assert [round(lr, 7) for lr in asked] == [5.477e-4, 2.34e-4, 1.53e-4, 1.892e-4]
    assert [p.learned for p in search.probes] == [False, False, True, True]
    assert search.learns_at == asked[-1] and search.fails_at == asked[1]
    assert search.learns_at <= 2e-4 < search.fails_at
    assert search.fails_at / search.learns_at == pytest.approx(30 ** (1 / 16), rel=1e-3)
    lines = search.table().splitlines()
    assert len(lines) == 2 + SEARCH_PROBES and "does not learn" in lines[1] and "learns" in lines[3]
    assert lines[-1].startswith("bracket: learns at 0.000189, does not at 0.000234 (a factor 1.24)")


@pytest.mark.parametrize("lr, why", [
    (1e-4, "not strictly between"), (3e-3, "not strictly between"), (1e-2, "not strictly between"),
    (1e-5, "not strictly between"), (-1e-3, "not strictly between"),
    (math.nan, "expected a finite number"), (math.inf, "expected a finite number"),
    ("1e-3", "expected a finite number"), (True, "expected a finite number"),
])
def test_a_probe_it_cannot_check_is_refused_before_training(lr, why):
    """A rate the bracket already decides (a bound, or outside), or no number: refused by name,
    and nothing trains (a probe that trained would be recorded)."""
    train, asked = fake_train(edge=2e-4)
    search = LearningRateSearch(train=train)
    with pytest.raises(ValueError, match=f"^lr: .*{why}"):
        search.probe(lr)
    assert asked == [] and search.probes == [] and (search.learns_at, search.fails_at) == START


def test_the_bracket_moves_so_an_old_rate_is_refused():
    train, _ = fake_train(edge=2e-4)
    search = LearningRateSearch(train=train)
    search.probe(1e-3)  # fails: the bracket is now (1e-4, 1e-3)
    with pytest.raises(ValueError, match="not strictly between"):
        search.probe(2e-3)


def test_a_bracket_upside_down_is_refused():
    with pytest.raises(ValueError, match="learns_at, fails_at: need 0 < learns_at < fails_at"):
        LearningRateSearch(3e-3, 1e-4)


@pytest.mark.slow
@pytest.mark.usefixtures("single_thread")
def test_a_real_probe_is_run_bs_configuration_at_another_rate():
    """One probe trained for real (2 steps): its records are Run B's configuration's, and the
    verdict compares the same problems before and after."""
    probe = train_probe(2e-4, steps=2)
    assert [r["step"] for r in probe.records] == [1, 2] and REPAIR_STEPS == 10
    assert 0 <= probe.accuracy_before <= 1 and 0 <= probe.accuracy_after <= 1
    assert probe.learned == (probe.accuracy_after >= probe.accuracy_before)
