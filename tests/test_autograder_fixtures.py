"""The stored expected values must still be what the reference computes (regenerate with
`python -m autograder.fixtures`)."""

import pytest
import torch

from autograder.fixtures.__main__ import compute_fixtures
from autograder.grader import load_fixtures


def _assert_close(stored, fresh, where):
    if isinstance(fresh, torch.Tensor):
        assert isinstance(stored, torch.Tensor) and stored.shape == fresh.shape, where
        assert torch.allclose(stored.double(), fresh.double(), rtol=1e-6, atol=1e-9), where
    elif isinstance(fresh, dict):
        assert set(stored) == set(fresh), where
        for key in fresh:
            _assert_close(stored[key], fresh[key], f"{where}.{key}")
    elif isinstance(fresh, (list, tuple)):
        assert len(stored) == len(fresh), where
        for i, (a, b) in enumerate(zip(stored, fresh)):
            _assert_close(a, b, f"{where}[{i}]")
    else:
        assert abs(float(stored) - float(fresh)) <= 1e-6 * (1 + abs(float(fresh))), where


def test_fixtures_match_the_reference():
    stored = load_fixtures()
    fresh = compute_fixtures()
    assert set(stored) == set(fresh), "cases added or removed: run python -m autograder.fixtures"
    for case, seeds in fresh.items():
        for seed, entry in seeds.items():
            assert stored[case][seed]["digest"] == entry["digest"], f"{case} inputs changed"
            _assert_close(stored[case][seed]["expected"], entry["expected"], f"{case}[{seed}]")


def test_a_drifted_fixture_is_detected():
    stored = load_fixtures()["compute_entropy/logits"]["0"]["expected"]
    drifted = stored.clone()
    drifted[0, 0] += 1e-4
    with pytest.raises(AssertionError):
        _assert_close(drifted, stored, "compute_entropy/logits[0]")
