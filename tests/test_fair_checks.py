"""Checks that judge the answer, not the arithmetic around it.

- A float32 answer to a float64 question is held to float32 rounding (`core.bounds`): the course's
  reference run in float32 passes every value check on 200 fresh seeds, and the mutants of
  tests/test_autograder.py, run in float32 too, still lose their checks with their diagnoses.
- A near miss costs the value check only: the checks `paid_with` it stay paid (`core.PLAUSIBLE`).
- A package the grading environment lacks is named as the grader's limit, and einops, which it
  has, earns full marks, in both sandbox tiers.
- A graded name that a locked (given or setup) notebook cell binds is never the student's.

In-process gradings (tests/test_portability.py's `grade_in_process`) judge the checks' arithmetic;
the sandboxed ones judge what a student sees.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
import torch
from test_autograder import MUTANTS
from test_portability import grade_in_process

from autograder.trusted.checks.off_policy import make_kl
from autograder.trusted.core import Fail, compare, compare_scalar, precision
from autograder.trusted.reference import reference
from course.registry import GRADED_FUNCTIONS

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "autograder_cases"
# functions whose inputs a float32 cast can reach (the others take a model, or no floats)
FLOAT_FUNCTIONS = tuple(n for n in GRADED_FUNCTIONS if n not in (
    "tokenize_prompt_and_output", "get_response_log_probs", "grpo_train_step"))
# the one check whose contract is the dtype itself: float64 logits keep float64 entropy
DTYPE_CONTRACT = "float32/float64 keep their dtype"


def _float32(value):
    return value.float() if isinstance(value, torch.Tensor) and value.dtype == torch.float64 else value


def in_float32(function):
    """`function` computing in float32: every float64 tensor argument cast down first (what a
    `.float()` at the top of a student's function does)."""
    def cast(*args, **kwargs):
        return function(*map(_float32, args), **{k: _float32(v) for k, v in kwargs.items()})
    return cast


def _lost(graded: dict) -> dict:
    return {name: output for name, (score, top, output) in graded.items() if score < top}


def _mutant(bug: str) -> dict:
    sys.path.insert(0, str(CASES))
    try:
        return {k: v for k, v in runpy.run_path(str(CASES / f"mutant_{bug}.py")).items() if callable(v)}
    finally:
        sys.path.remove(str(CASES))


# ---- item: the tolerance follows the precision of the answer ----------------------------------
def test_float32_rounding_passes_where_a_float64_answer_would_not():
    """r − mean in float32 keeps rounding of the operands' size (~1e-7) at an entry near zero."""
    expected = torch.tensor([1.233759356268763, 1.0e-7], dtype=torch.float64)
    got = torch.tensor([1.2337595224380493, 1.7881393432617188e-07], dtype=torch.float32)
    compare(got, expected, "advantages")
    compare(got.double(), expected, "advantages")  # float32 arithmetic cast back: same precision
    with pytest.raises(Fail, match="does not match"):
        compare(got.double() + 1e-12, expected, "advantages")  # float64 answer: the float64 tolerance
    # a known bug: the biased std scales advantages of groups of 4 by sqrt(4/3), 15%
    with pytest.raises(Fail):
        compare(got * (4 / 3) ** 0.5, expected, "advantages")


def test_the_precision_of_an_answer():
    assert precision(torch.tensor([0.1], dtype=torch.float32)) == torch.float32
    assert precision(torch.tensor([0.1], dtype=torch.float32).double()) == torch.float32
    assert precision(torch.tensor([0.1, float("nan")], dtype=torch.float64)) == torch.float64
    assert precision(torch.tensor([0.1], dtype=torch.bfloat16)) == torch.bfloat16


def test_a_python_float_from_float32_arithmetic_is_held_to_float32_rounding():
    """A mean of centered float32 values is 3e-8, not 0: within 64 ulps of the advantages' size 1.5,
    though not of 0 itself."""
    compare_scalar(2.9802322387695312e-08, 0.0, "advantage_mean", magnitude=1.5)
    with pytest.raises(Fail):
        compare_scalar(2.9802322387695312e-08, 0.0, "advantage_mean")
    with pytest.raises(Fail):  # a float64 number off by as much is not rounding
        compare_scalar(2.98e-08, 0.0, "advantage_mean", magnitude=1.5)


def test_half_precision_is_never_widened():
    """A miss of 3.8e-6: within 64 float32 ulps, not within the float64 tolerance."""
    expected = torch.tensor([1 + 2 ** -18], dtype=torch.float64)
    compare(torch.tensor([1.0], dtype=torch.float32), expected, "x")
    with pytest.raises(Fail):
        compare(torch.tensor([1.0], dtype=torch.bfloat16), expected, "x")


@pytest.mark.slow
def test_the_reference_in_float32_passes_every_value_check_on_200_seeds():
    namespace = {name: in_float32(reference(name)) for name in FLOAT_FUNCTIONS}
    failures = {}
    for seed in range(200):
        graded = grade_in_process(namespace, FLOAT_FUNCTIONS, seed=seed)
        assert len(graded) >= 25
        lost = {n: o for n, o in _lost(graded).items() if DTYPE_CONTRACT not in n}
        failures.update({f"seed {seed}: {n}": o for n, o in lost.items()})
    assert not failures, failures


@pytest.mark.parametrize("bug", sorted(b for b, (f, _, _) in MUTANTS.items()
                                       if f in FLOAT_FUNCTIONS and b != "entropy_no_upcast"))
def test_every_mutant_computing_in_float32_still_loses_its_check(bug):
    """`entropy_no_upcast`'s bug is a dtype: in float32 it is another bug, and the dtype check
    catches that one."""
    function, words, diagnosis = MUTANTS[bug]
    namespace = {name: in_float32(f) for name, f in _mutant(bug).items()}
    lost = {n: o for n, o in _lost(grade_in_process(namespace, (function,))).items() if words in n}
    assert any(diagnosis in output for output in lost.values()), (bug, lost)


# ---- item: δ in float32, the ratio in float64 -------------------------------------------------
def _ratio_k1(combine):
    """estimate_kl with ratio_k1 = combine(δ taken in float32, ratio kept in float64)."""
    honest = reference("estimate_kl")

    def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None, response_mask=None):
        if estimator != "ratio_k1":
            return honest(new_logprobs, ref_logprobs, estimator, ratio, response_mask)
        return combine(new_logprobs.float() - ref_logprobs.float(), ratio)
    return estimate_kl


MIXED_KL = {"ratio·δ": (lambda d, r: r * d, None),
            "δ / ratio": (lambda d, r: d / r, "δ / ratio instead of ratio·δ"),
            "δ": (lambda d, r: d.double(), "k1 without the ratio")}


@pytest.mark.parametrize("shape", MIXED_KL)
def test_ratio_k1_from_a_float32_delta_is_judged_by_its_formula(shape):
    """The mixed answer misses the float64 tolerance by δ's float32 rounding (3.6e-7 at most
    on fresh seeds 0-499) and passes; the known mistakes in the same precision keep their
    diagnoses (500 seeds: benchmarks/README.md, "Float32 answers to float64 cases")."""
    combine, diagnosis = MIXED_KL[shape]
    function = _ratio_k1(combine)
    for seed in range(12):
        (lost,) = [o for n, (s, top, o) in grade_in_process(
            {"estimate_kl": function}, ("estimate_kl",), seed=seed).items()
            if "k1, k2" in n and s < top] or [None]
        if diagnosis is None:
            assert lost is None, (seed, lost)
        else:
            assert diagnosis in lost, (seed, lost)
    # the seeds have teeth: seed 9's honest answer fails the float64 tolerance alone
    inputs = make_kl(9)
    with pytest.raises(Fail, match="does not match"):
        compare(_ratio_k1(MIXED_KL["ratio·δ"][0])(**inputs, estimator="ratio_k1"),
                inputs["ratio"] * (inputs["new_logprobs"] - inputs["ref_logprobs"]), "ratio_k1")


# ---- item: a near miss never cascades ----------------------------------------------------------
def _rewards(scale: float, shift: float):
    honest = reference("compute_rollout_rewards")

    def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
        rewards, metadata = honest(reward_fn, rollout_responses, repeated_ground_truths)
        return rewards * scale + shift, metadata
    return compute_rollout_rewards


@pytest.mark.parametrize("scale, shift, bad_input_paid", [(1 + 1e-5, 0.0, True), (1.0, 0.5, False)])
def test_a_near_miss_costs_the_value_check_only(scale, shift, bad_input_paid):
    """Rewards 1e-5 relative off (a near miss) fail the value check, and the ValueError check it
    gates still pays; rewards 0.5 off are not plausibly right, and the gate holds."""
    graded = grade_in_process({"compute_rollout_rewards": _rewards(scale, shift)},
                              ("compute_rollout_rewards",))
    value, gated = (next(v for n, v in graded.items() if words in n)
                    for words in ("rewards (float32)", "different lengths raise ValueError"))
    assert value[0] == 0 and "stored cases passed" not in value[2], value
    assert (gated[0] == gated[1]) == bad_input_paid, gated


# ---- item: the grading environment's packages --------------------------------------------------
ENTROPY = """import torch
from {package} import reduce


def compute_entropy(logits):
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    log_p = torch.log_softmax(logits, dim=-1)
    return -reduce(log_p.exp() * log_p, "... v -> ...", "sum")
"""


def _notebook(folder: Path, package: str) -> Path:
    """02_scoring.ipynb whose compute_entropy uses `package`'s reduce, imported in its own cell."""
    imports, function = ENTROPY.format(package=package).split("\n\n\n")
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": source} for source in (imports, function)]
    folder.mkdir()
    (folder / "02_scoring.ipynb").write_text(json.dumps({"cells": cells, "metadata": {},
                                                         "nbformat": 4, "nbformat_minor": 5}))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["bubblewrap", "landlock"])
def test_einops_earns_full_marks_and_a_missing_package_is_the_graders_limit(tmp_path, isolation):
    from autograder.api import grade
    from autograder.trusted.isolation import sandbox_problem

    if sandbox_problem(ROOT, isolation) is not None:
        pytest.skip(f"no {isolation} here: {sandbox_problem(ROOT, isolation)}")
    honest = grade(str(_notebook(tmp_path / "einops", "einops")), ("compute_entropy",),
                   isolation=isolation)
    assert honest["score"] == honest["max_score"] == 4, honest["results"]
    missing = grade(str(_notebook(tmp_path / "missing", "einops_extras")), ("compute_entropy",),
                    isolation=isolation)
    outputs = [r["output"] for r in missing["results"].values()]
    assert missing["score"] == 0 and len(outputs) == 3
    plain = "the grading environment has no package 'einops_extras'; ask your instructor"
    assert all(plain in output for output in outputs), outputs


def test_a_missing_package_is_named_in_every_way_it_surfaces():
    from autograder.trusted.core import describe_error, plain_problem

    raised = {"status": "error", "error_type": "ModuleNotFoundError",
              "message": "No module named 'einops_extras.layers'"}
    assert describe_error("f", raised) == ("f could not import 'einops_extras': the grading "
                                           "environment has no package 'einops_extras'; ask your instructor")
    later = {"status": "error", "error_type": "NameError", "message": "name 'reduce' is not defined"}
    problems = ["02_scoring.ipynb, code cell 1, line 2: ModuleNotFoundError: No module named 'einops_extras'"]
    assert "has no package 'einops_extras'" in describe_error("f", later, problems)
    assert "has no package" not in describe_error("f", later)  # a NameError of the student's own
    assert plain_problem(problems[0]).endswith("line 2: the grading environment has no package "
                                               "'einops_extras'; ask your instructor")
    withheld = "x: ModuleNotFoundError: No module named 'course.losses' (not available while grading)"
    assert plain_problem(withheld) == withheld  # the course's own modules say why themselves


# ---- item: given cells are never the student's implementation -----------------------------------
def _cell(source: str, locked: bool) -> dict:
    marks = {"grade": False, "grade_id": "given_x", "locked": True, "solution": False} if locked else {}
    return {"cell_type": "code", "metadata": {"nbgrader": marks} if marks else {}, "outputs": [],
            "execution_count": None, "source": source}


@pytest.mark.parametrize("locked", [True, False])
def test_a_graded_name_bound_in_a_locked_cell_is_not_the_students(tmp_path, locked):
    """The locked cell still runs (its helpers are needed), but its graded names are not graded."""
    from course.submissions.reader import load_submission

    given = "from course.scoring import get_response_log_probs\n\ndef helper():\n    return 1"
    cells = [_cell(given, locked), _cell("def compute_entropy(logits):\n    return logits", False)]
    (tmp_path / "07_train_step.ipynb").write_text(json.dumps({"cells": cells, "metadata": {},
                                                              "nbformat": 4, "nbformat_minor": 5}))
    submission = load_submission(str(tmp_path), ROOT)
    assert set(submission.providers) == {"compute_entropy"} | (set() if locked else {"get_response_log_probs"})
    texts = [text for _, text in submission.units[0]["statements"]]
    assert any("import get_response_log_probs" in t for t in texts) and any("def helper" in t for t in texts)


# ---- honest shapes the stage child's refusals must leave alone --------------------------------
# one compute_entropy built of every shape an honest student may reach for: functools.partial, a
# bound method and a callable object, numpy, torch.func.vmap, recursion, einops, `import gc`,
# lru_cache on a helper, functools.wraps, a dataclass, inspect, logging and warnings, and a custom
# torch.autograd.Function (the entropy of log_softmax: H = -sum_v p_v log p_v, p = softmax(z))
SHAPES = '''
import dataclasses
import functools
import gc
import inspect
import logging
import warnings

import einops
import numpy as np
import torch

gc.collect()
LOG = logging.getLogger("shapes")


@dataclasses.dataclass(frozen=True)
class Axis:
    dim: int = -1


class _LogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        out = torch.log_softmax(z, dim=-1)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors  # d log_softmax: g - softmax * sum(g)
        return grad - out.exp() * grad.sum(-1, keepdim=True)


def _logged(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        LOG.warning("calling %s", function.__name__)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.warn("a warning finds its caller", stacklevel=2)
        return function(*args, **kwargs)
    return wrapper


@functools.lru_cache(maxsize=None)
def _axis() -> Axis:
    return Axis()


class _Entropy:
    def __init__(self, axis):
        self.axis = axis

    def __call__(self, log_p):
        p = log_p.exp()
        return self.total(torch.where(p > 0, -p * log_p, torch.zeros_like(p)))

    def total(self, x):
        return x.sum(self.axis.dim)


def _depth(n):
    return 0 if n == 0 else 1 + _depth(n - 1)


@_logged
def compute_entropy(logits):
    if logits.ndim == 0 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty vocabulary axis, got {tuple(logits.shape)}")
    assert "logits" in inspect.signature(compute_entropy).parameters and _depth(3) == 3
    dtype = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype
    flat = einops.rearrange(logits.to(dtype), "... v -> (...) v")
    flat = flat - flat.amax(-1, keepdim=True).detach()
    per_row = torch.func.vmap(_Entropy(_axis()).__call__)(_LogSoftmax.apply(flat))
    assert np.all(np.isfinite(per_row.detach().cpu().numpy()) | np.isnan(per_row.detach().cpu().numpy()))
    return functools.partial(torch.reshape, shape=logits.shape[:-1])(per_row)
'''


def test_honest_shapes_load_read_and_answer(tmp_path):
    """In a stage child's loader (a process of its own, as test_provenance's `_load`): every
    shape is read code, nothing is refused, and the answer is the entropy."""
    from test_provenance import _load

    loaded = _load(tmp_path, SHAPES)
    assert loaded["statuses"] == {"compute_entropy": "ok"}, loaded
    assert loaded["errors"] == [] and loaded["unread"] == {}, loaded
    assert loaded["call"]["status"] == "ok" and loaded["tensor"], loaded["call"]


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["bubblewrap", "landlock"])
def test_honest_shapes_earn_full_marks(tmp_path, isolation):
    from autograder.api import grade
    from autograder.trusted.isolation import sandbox_problem

    if sandbox_problem(ROOT, isolation) is not None:
        pytest.skip(f"no {isolation} here: {sandbox_problem(ROOT, isolation)}")
    (tmp_path / "shapes.py").write_text(SHAPES)
    graded = grade(str(tmp_path / "shapes.py"), ("compute_entropy",), official=True,
                   isolation=isolation, probe_timeout=8.0)
    failed = {n: r["output"][:300] for n, r in graded["results"].items() if r["status"] != "passed"}
    assert graded["score"] == graded["max_score"] == 4, failed
