"""The stored cases must still be what their definition makes and what the reference computes
(regenerate with `python -m instructor.fixtures`). Machine-independent: inputs and answers are
compared with tolerances, never bit for bit, so this passes on any CPU or torch version allowed."""

import pytest
import torch

from autograder.trusted import checks  # noqa: F401  (registers the cases)
from autograder.trusted.core import CASES, case_fingerprint, layout
from autograder.trusted.grader import load_fixtures

# Remaking inputs runs torch's RNG and exp/log: a machine may round them one ulp away.
INPUTS = dict(rtol=1e-12, atol=1e-300)
# The reference on the stored inputs: as loose as the loosest check tolerance (train-step updates
# through float32 RMSNorm), and 1e4× tighter than any known bug.
ANSWERS = dict(rtol=1e-5, atol=1e-7)


def _assert_close(stored, fresh, where, tolerance):
    if isinstance(fresh, torch.Tensor):
        assert isinstance(stored, torch.Tensor) and stored.shape == fresh.shape, where
        assert stored.dtype == fresh.dtype, where
        if fresh.dtype.is_floating_point:
            assert torch.allclose(stored.double(), fresh.detach().double(), **tolerance), where
        else:
            assert torch.equal(stored, fresh), where
    elif isinstance(fresh, dict):
        assert set(stored) == set(fresh), where
        for key in fresh:
            _assert_close(stored[key], fresh[key], f"{where}.{key}", tolerance)
    elif isinstance(fresh, (list, tuple)):
        assert len(stored) == len(fresh), where
        for i, (a, b) in enumerate(zip(stored, fresh)):
            _assert_close(a, b, f"{where}[{i}]", tolerance)
    elif isinstance(fresh, float):
        assert abs(stored - fresh) <= tolerance["atol"] + tolerance["rtol"] * abs(fresh), where
    else:
        assert stored == fresh, where


@pytest.fixture(scope="module")
def stored():
    return load_fixtures()


def test_every_case_is_stored_with_its_current_definition(stored):
    assert set(stored) == set(CASES), "cases added or removed: run python -m instructor.fixtures"
    for name, spec in CASES.items():
        assert stored[name]["fingerprint"] == case_fingerprint(spec), f"{name} changed: run python -m instructor.fixtures"
        assert set(stored[name]["seeds"]) == {str(seed) for seed in spec.seeds}


def test_stored_inputs_are_what_the_definition_makes(stored):
    for name, spec in CASES.items():
        for seed in spec.seeds:
            _assert_close(stored[name]["seeds"][str(seed)]["inputs"], spec.make(seed), f"{name}[{seed}]", INPUTS)


@pytest.mark.slow
def test_stored_answers_are_the_reference_on_the_stored_inputs(stored):
    for name, spec in CASES.items():
        for seed, entry in stored[name]["seeds"].items():
            _assert_close(entry["expected"], spec.expected(entry["inputs"]), f"{name}[{seed}]", ANSWERS)
            assert ("diagnostics" in entry) == (spec.diagnostics is not None), f"{name}[{seed}]"
            if spec.diagnostics is not None:  # what a stored-only grading diagnoses mistakes with
                _assert_close(entry["diagnostics"], spec.diagnostics(entry["inputs"]),
                              f"{name}[{seed}] diagnostics", ANSWERS)


def test_the_fingerprint_ignores_float_bits_but_not_layout():
    spec = CASES["compute_grpo_loss/batch"]
    inputs = spec.make(0)
    nudged = {k: torch.nextafter(v, torch.full_like(v, float("inf"))) if isinstance(v, torch.Tensor) else v
              for k, v in inputs.items()}
    assert layout(nudged) == layout(inputs)  # one ulp on every input: same definition
    assert layout({**inputs, "ratio": inputs["ratio"][:, :-1]}) != layout(inputs)
    assert layout({**inputs, "ratio": inputs["ratio"].float()}) != layout(inputs)


def test_a_drifted_answer_is_detected(stored):
    answer = stored["compute_entropy/logits"]["seeds"]["0"]["expected"]
    drifted = answer.clone()
    drifted[0, 0] += 1e-4
    with pytest.raises(AssertionError):
        _assert_close(drifted, answer, "compute_entropy/logits[0]", ANSWERS)


def test_a_failed_comparison_prints_every_digit_and_the_dtype():
    from autograder.trusted.core import Fail, Tolerance, compare, compare_scalar

    exact = Tolerance(0.0, 0.0, "bit for bit, for this test only", float32_ulps=0)
    got = torch.tensor([0.885312], dtype=torch.float32)
    with pytest.raises(Fail) as failure:
        compare(got, torch.tensor([0.885312], dtype=torch.float64), "x", tolerance=exact)
    assert "got 0.885312020778656 (torch.float32), expected 0.885312 (torch.float64)" in str(failure.value)
    with pytest.raises(Fail, match=r"is 0\.885312020778656 \(torch\.float32\), expected 0\.885312$"):
        compare_scalar(got[0], 0.885312, "x", tolerance=exact)
