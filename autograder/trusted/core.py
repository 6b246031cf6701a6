"""The trusted judging vocabulary: checks, cases with stored inputs and expected values,
comparisons.

A check is a named, pointed function of a `Context` (see `grader.py`) that either returns (full
points) or raises `Fail` with the reason (zero points). A check may be `paid_with` the main value
check of its function: error paths and properties that a constant satisfies pay only for code that
also computes plausibly right values (the value check passes, or misses by no more than
`PLAUSIBLE` and looks like no known mistake: a float difference near the tolerance costs the value
check, never the function's other points). Comparisons know the common wrong answers:
`compare(got, expected, what, mistakes)` computes each mistake's answer from the same inputs and,
when the student's output matches one, says "this looks like X; fix: Y".

No verdict depends on the bit-exact floats of a machine: stored cases keep their inputs (the
submission is fed exactly those), outputs are compared with the tolerances below, each justified
by the arithmetic that produces the value, and a stored case is stale only when its definition
(the layout of its inputs) changes, never when a machine rounds differently.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from course.registry import STAGE_OF

# Check names are test ids and results.json keys: keep them ASCII.
ASCII = str.maketrans({"−": "-", "·": "*", "π": "pi", "ε": "eps", "δ": "d", "Σ": "sum", "≤": "<="})


class Fail(Exception):
    """A check failed; the message is shown to the student. `near`: the values were off by no more
    than `PLAUSIBLE` and matched no known mistake, so the function plausibly computes the right
    thing (the checks paid with this one still pay: see `Check.paid_with`)."""

    def __init__(self, message: str, near: bool = False):
        super().__init__(message)
        self.near = near


class NeedsReference(Exception):
    """A stored-only grading (the student edition's practice grade) reached for the reference:
    the check is skipped, and says so. Mistake diagnoses that reach for it are left out."""


# Set while a check runs in a stored-only grading: the verdict may use stored cases only.
STORED_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("stored_only", default=False)


def require_reference(what: str) -> None:
    """Raise NeedsReference in a stored-only grading; `what` says what needed the reference."""
    if STORED_ONLY.get():
        raise NeedsReference(f"this check needs {what}, which a stored-only practice grade does "
                             "not use: the official grade judges it")


@dataclass
class Check:
    function: str
    title: str
    points: float
    run: Callable
    needs_cuda: bool = False
    paid_with: str | None = None  # title of the check of the same function this one is paid with
    # the data-parallel ranks it forks: a self-check skips it without os.fork
    needs_processes: int = 0

    @property
    def name(self) -> str:
        return f"{self.function}: {self.title}".translate(ASCII)

    @property
    def gate(self) -> str | None:
        """The name of the check that must pass for this one to pay (None: paid on its own)."""
        return f"{self.function}: {self.paid_with}".translate(ASCII) if self.paid_with else None

    @property
    def stage(self) -> str:
        return STAGE_OF[self.function]


@dataclass(frozen=True)
class Tolerance:
    """|got − expected| ≤ atol + rtol·|expected|, elementwise; `why` is the arithmetic behind it.

    An answer that carries float32 precision against a float64 expected value is held to
    `float32_ulps` float32 ulps instead where that is wider (see `bounds`)."""

    rtol: float
    atol: float
    why: str
    float32_ulps: int = 64


# Measured across ATEN_CPU_CAPABILITY default/avx2/avx512, 1-2 threads and one-ulp input changes
# (tests/test_portability.py). A float64 exp/log differs by ≤ 1 ulp (1.1e-16) between math
# libraries.
VALUES = Tolerance(1e-6, 1e-8, "float64 cases: libm and SIMD widths differ by ≤ 1e-15 relative, "
                               "and one "
                   "ulp in a group of equal rewards, divided by std + eps = 1e-6, by 2e-10 "
                   "absolute (1/45 "
                   "of atol); rtol leaves room for correct code that rounds once in float32 (a "
                   "float32 "
                   "torch.tensor(cap): 2e-8). Known bugs move a value by ≥ 1e-2 (eps inside the "
                   "sqrt: "
                   "6e-7 at eps = 1e-6, but 10% in the eps = 0.1 cases)")
MODEL = Tolerance(1e-5, 1e-5, "the float64 tiny OLMo2 normalizes in float32 (RMSNorm upcasts): "
                              "log-probs "
                  "move by ≤ 7e-8 across CPU capabilities and one-ulp weights (1/800 of the "
                  "tolerance); "
                  "the nearest known bug (unnormalized logits) is off by logsumexp ≈ 4")
UPDATE = Tolerance(1e-5, 1e-5, "a train-step update through the float32 RMSNorm: ≤ 5e-8 (4e-7 of "
                               "the "
                   "largest entry) across CPU capabilities, 1/28 of the tolerance (atol is scaled "
                   "by the "
                   "largest entry); wrong normalizations move it by ≥ 5%")
METADATA = Tolerance(1e-5, 1e-7, "train-step losses are sums of float32-rounded terms of opposite "
                                 "sign: "
                     "≤ 3.5e-9 absolute / 9e-7 relative across CPU capabilities, ≥ 11× inside; "
                     "a wrong count or normalization is off by ≥ 1%")
FLOAT32_CHUNKS = Tolerance(1e-5, 1e-5, "a float32 model scored chunk by chunk against all at once: "
                                       "the "
                           "logsumexp sums in another order, ≤ 1e-6 measured at V = 8192 (|log p| "
                           "≤ 10), "
                           "1/10 of the tolerance; a chunk's own normalizer instead of the row's "
                           "is off by ≥ 1")
LARGE_LOGITS = Tolerance(1e-4, 1e-3, "float32 logits near 1e3 carry 6e-5 absolute rounding into "
                                     "logsumexp: "
                         "16× room; the naive softmax·log gives NaN")
BFLOAT16 = Tolerance(0.0, 2e-3, "float32 log-softmax of the same bfloat16 logits; a bfloat16 "
                                "log-softmax "
                     "is off by up to 2^-8·|log p| ≈ 1e-2")


# Correct code may compute in float32 from float64 inputs (a `.float()`, a float32 constant): every
# operation rounds to 2^-24 relative, and a cancellation such as r − mean keeps that rounding in
# absolute terms of the operands (IEEE 754; Higham, Accuracy and Stability of Numerical Algorithms,
# §1.7). Measured: the reference run in float32 on 200 fresh seeds misses the float64 answer by
# ≤ 8 ulps of the largest expected entry (tests/test_fair_checks.py); 64 ulps (7.6e-6 relative)
# is 8× that, and every known bug still misses by ≥ 1e-2 in at least one case.
FLOAT32 = torch.finfo(torch.float32).eps


def precision(value: torch.Tensor) -> torch.dtype:
    """The precision an answer carries: its dtype, or float32 for a float64 answer whose every
    finite entry is a float32 number (float32 arithmetic cast back: `.double()` of a float32
    result, a gradient through `.float()`, a Python float from `.item()` of a float32 tensor)."""
    if value.dtype != torch.float64:
        return value.dtype
    finite = value.detach()[torch.isfinite(value.detach())]
    return torch.float32 if bool((finite.float().double() == finite).all()) else torch.float64


def _largest(expected: torch.Tensor) -> float:
    finite = expected.detach()[torch.isfinite(expected.detach())]
    return float(finite.abs().max()) if finite.numel() else 0.0


def bounds(tolerance: Tolerance, got: torch.Tensor, expected: torch.Tensor, scale: float = 1.0,
           magnitude: float | None = None) -> tuple[float, float]:
    """(rtol, atol) for `got`: the tolerance, widened to float32 rounding where `got` carries
    float32 precision and `expected` is float64. The absolute part is relative to `magnitude`
    (default: the largest finite expected entry), the size of the terms whose rounding the answer
    keeps. Half precision is never widened: a bfloat16 answer to a float32 question is a mistake of
    its own."""
    rtol, atol = tolerance.rtol, tolerance.atol * scale
    if expected.dtype != torch.float64 or precision(got) != torch.float32:
        return rtol, atol
    magnitude = _largest(expected) if magnitude is None else magnitude
    ulps = tolerance.float32_ulps * FLOAT32
    return max(rtol, ulps), max(atol, ulps * magnitude)


# The gate of `paid_with`: a miss this small is arithmetic, not a wrong formula (every known
# mistake moves a value by ≥ 1e-2 or is named by its diagnosis); relative to the largest entry.
PLAUSIBLE = Tolerance(1e-3, 1e-3, "a near miss: rounding or a different but valid order of "
                      "operations; known mistakes move values by ≥ 1e-2 or are diagnosed by name")


@dataclass
class Case:
    """Inputs made from a seed, and the reference's answer for them.

    For `seeds`, the inputs and the answer are stored in autograder/fixtures/expected.pt: the
    submission is fed the stored inputs, so a machine that rounds `make` differently changes
    nothing.
    """

    name: str
    make: Callable[[int], dict]
    expected: Callable[[dict], object]
    seeds: tuple = (0, 1)
    # values stored beside a stored case's answer for the diagnoses of mistakes only (a fresh case
    # computes them when a mistake is looked for; a stored-only grading cannot)
    diagnostics: Callable[[dict], dict] | None = None


@dataclass
class Mistake:
    label: str
    fix: str
    answer: Callable[[], object]  # computes the wrong answer, lazily


CHECKS: list[Check] = []
CHECK_NAMED: dict[str, Check] = {}
CASES: dict[str, Case] = {}


def check(function: str, title: str, points: float = 1, needs_cuda: bool = False,
          paid_with: str | None = None, needs_processes: int = 0):
    """Register a check; `paid_with` names (by title) the value check this one is paid with."""
    def register(run):
        registered = Check(function, title, points, run, needs_cuda, paid_with, needs_processes)
        CHECKS.append(registered)
        CHECK_NAMED[registered.name] = registered
        return run
    return register


def case(name: str, expected: Callable, seeds: tuple = (0, 1), diagnostics: Callable | None = None):
    def register(make):
        CASES[name] = Case(name, make, expected, seeds, diagnostics)
        return make
    return register


def layout(value):
    """The shape of `value` without its float bits: keys, lengths, tensor dtypes and shapes, and the
    exact value of strings, ints and markers. Two machines always agree on it."""
    if isinstance(value, torch.Tensor):
        return f"T{value.dtype}{tuple(value.shape)}"
    if isinstance(value, dict):
        return {str(k): layout(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [layout(v) for v in value]
    return repr(value)


def case_fingerprint(spec: Case) -> str:
    """The definition of a stored case: its name, seeds and the layout of its inputs.

    It changes when a developer changes what a case feeds the submission (then run `python -m
    instructor.fixtures`), never with the machine, the torch or the Python version. Changes of
    values within the same layout keep the stored inputs and answers consistent with each other;
    tests/test_autograder_fixtures.py still asks for a regeneration then.
    """
    layouts = [layout(spec.make(seed)) for seed in spec.seeds]
    return hashlib.sha256(repr((spec.name, spec.seeds, layouts)).encode()).hexdigest()[:16]


@contextlib.contextmanager
def one_thread():
    """Trusted reference work on one thread: the worker's setting, and for tiny models several times
    faster than two threads that spin against each other on a loaded machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def tensor(got, what: str) -> torch.Tensor:
    if type(got) is not torch.Tensor:
        kind = got.get("__unsupported__") if isinstance(got, dict) else None
        raise Fail(f"{what} should be a torch.Tensor, got {kind or type(got).__name__}")
    return got


def close(got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> bool:
    got, expected = got.detach(), expected.detach()
    if tuple(got.shape) != tuple(expected.shape):
        return False
    if got.dtype == torch.bool or expected.dtype == torch.bool:
        got, expected = got.long(), expected.long()
    if not got.dtype.is_floating_point and not expected.dtype.is_floating_point:
        return bool(torch.equal(got.long(), expected.long()))
    return bool(torch.allclose(got.double(), expected.double(), rtol=rtol, atol=atol))


def number(value: float) -> str:
    """Every digit a float64 has (repr's shortest round-trip), so two printed values never look
    equal."""
    return repr(float(value))


def _where(got: torch.Tensor, expected: torch.Tensor) -> str:
    g, e = got.detach().double(), expected.detach().double()
    error = (g - e).abs().nan_to_num(float("inf"))
    index = tuple(int(i) for i in torch.unravel_index(error.argmax(),
                                                      error.shape)) if error.ndim else ()
    return (f"largest difference {float(error.max()):.3g} at index {list(index)}: "
            f"got {number(g[index])} ({got.dtype}), expected {number(e[index])} ({expected.dtype})")


def diagnose(got, mistakes, rtol: float, atol: float) -> str | None:
    for mistake in mistakes:
        try:
            wrong = mistake.answer()
        except Exception:
            continue
        if isinstance(wrong, torch.Tensor) and isinstance(got, torch.Tensor) \
                and close(got, wrong, rtol, atol):
            return f"this looks like {mistake.label}; fix: {mistake.fix}"
    return None


def compare(got, expected: torch.Tensor, what: str, mistakes=(), tolerance: Tolerance = VALUES,
            scale: float = 1.0, magnitude: float | None = None) -> None:
    """Fail with a diagnosis unless `got` matches `expected` (a trusted tensor).

    `scale` multiplies atol, for values whose rounding is relative to their largest entry;
    `magnitude` is the size of the terms a float32 answer's rounding is relative to (`bounds`)."""
    got = tensor(got, what)
    rtol, atol = bounds(tolerance, got, expected, scale, magnitude)
    if close(got, expected, rtol, atol):
        return
    hint = diagnose(got, mistakes, rtol, atol)
    if hint:
        raise Fail(f"{what} is wrong: {hint}")
    if tuple(got.shape) != tuple(expected.shape):
        raise Fail(f"{what} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    if (
        got.dtype.is_floating_point
        and bool(torch.isnan(got).any())
        and not bool(torch.isnan(expected).any())
    ):
        raise Fail(f"{what} contains NaN where the expected values are finite")
    near = close(got, expected, PLAUSIBLE.rtol, PLAUSIBLE.atol * _largest(expected))
    raise Fail(f"{what} does not match the reference: {_where(got, expected)}", near=near)


def scalar(got, what: str) -> float:
    if isinstance(got, bool):
        return float(got)
    if isinstance(got, (int, float)):
        return float(got)
    if type(got) is torch.Tensor and got.numel() == 1:
        return float(got.double().reshape(()))
    raise Fail(f"{what} should be a number or a 0-dim tensor, got "
               f"{type(got).__name__}{list(got.shape) if isinstance(got, torch.Tensor) else ''}")


def scalar_bounds(got, expected: float, tolerance: Tolerance = VALUES,
                  magnitude: float | None = None) -> tuple[float, float]:
    """`bounds` for a number: a float32 0-dim tensor, or a Python float that is a float32 number,
    carries float32 precision."""
    value = got.detach().reshape(()) if isinstance(got, torch.Tensor) \
        else torch.tensor(float(got), dtype=torch.float64)
    return bounds(tolerance, value, torch.tensor(expected, dtype=torch.float64),
                  magnitude=abs(expected) if magnitude is None else magnitude)


def scalar_matches(got, expected: float, tolerance: Tolerance = VALUES,
                   magnitude: float | None = None) -> bool:
    """Whether the number `got` (already read with `scalar`) is `expected` within
    `scalar_bounds`."""
    rtol, atol = scalar_bounds(got, expected, tolerance, magnitude)
    return abs(float(got) - expected) <= atol + rtol * abs(expected)


def compare_scalar(got, expected: float, what: str, mistakes=(), tolerance: Tolerance = VALUES,
                   magnitude: float | None = None) -> None:
    """Fail with a diagnosis unless the number `got` is `expected`; `magnitude` as in `compare`."""
    value = scalar(got, what)
    rtol, atol = scalar_bounds(got if isinstance(got, torch.Tensor) else value, expected, tolerance,
                               magnitude)
    if abs(value - expected) <= atol + rtol * abs(expected):
        return
    hint = diagnose(torch.tensor(value, dtype=torch.float64), mistakes, rtol, atol)
    if hint:
        raise Fail(f"{what} is wrong: {hint}")
    kind = got.dtype if isinstance(got, torch.Tensor) else type(got).__name__
    near = abs(value - expected) <= PLAUSIBLE.atol * max(abs(expected), magnitude or 0.0) \
        + PLAUSIBLE.rtol * abs(expected)
    raise Fail(f"{what} is {number(value)} ({kind}), expected {number(expected)}", near=near)


def field(output, key: str, what: str):
    if not isinstance(output, dict) or key not in output:
        have = sorted(output) if isinstance(output, dict) else type(output).__name__
        raise Fail(f"{what} should contain {key!r}; got {have}")
    return output[key]


def item(output, index: int, length: int, what: str):
    if not isinstance(output, (list, tuple)) or len(output) != length:
        size = f" of {len(output)}" if isinstance(output, (list, tuple)) else ""
        raise Fail(f"{what} should be a tuple of {length}, got {type(output).__name__}{size}")
    return output[index]


_NO_MODULE = re.compile(r"(?:ModuleNotFoundError: )?No module named '([A-Za-z_][\w.]*)'")


def missing_package(text: str) -> str | None:
    """The package a "No module named 'x.y'" error names ('x'), unless it is the course's own
    (a stage module the grading withholds on purpose says so itself)."""
    found = _NO_MODULE.search(text)
    name = found.group(1).split(".")[0] if found else None
    return None if name in (None, "course") else name


def no_package(name: str) -> str:
    return f"the grading environment has no package {name!r}; ask your instructor"


def plain_problem(problem: str) -> str:
    """A problem met while loading the submission, with a missing package named as the grader's
    limit rather than the student's error."""
    name = missing_package(problem)
    return _NO_MODULE.sub(no_package(name), problem) if name else problem


def describe_error(function: str, response: dict, load_problems=()) -> str:
    """What the student's code raised. An import that the grading environment cannot satisfy is
    the grader's limit: said plainly, also when it surfaces later as a NameError of the name the
    failed import would have bound (`load_problems`: what went wrong while loading)."""
    status = response.get("status")
    if status == "error":
        if response.get("not_implemented"):
            return f"{function} raises NotImplementedError: it is not implemented yet"
        missing = missing_package(str(response.get("message", ""))) \
            if response.get("error_type") in ("ModuleNotFoundError", "ImportError") else None
        if missing:
            return f"{function} could not import {missing!r}: {no_package(missing)}"
        absent = sorted({name for name in map(missing_package, load_problems) if name})
        if response.get("error_type") == "NameError" and absent:
            return (f"{function} raised NameError: {response.get('message')}, after the "
                    "submission's "
                    "import of " + ", ".join(map(repr, absent)) + " failed: "
                    + "; ".join(map(no_package, absent)))
        tail = str(response.get("traceback", "")).strip().splitlines()[-3:]
        where = ("\n  " + "\n  ".join(tail)) if tail else ""
        if response.get("error_type") == "MemoryError":  # the per-process bound, met in Python
            return (f"{function} ran out of memory (raised MemoryError: it asked for more than "
                    f"the grading's memory limit lets one process hold){where}")
        return f"{function} raised {response.get('error_type')}: {response.get('message')}{where}"
    return f"{function}: unexpected answer from the probe (status {status!r})"


def judge_cases(ctx, case_name: str, judge, stored: int | None = None) -> None:
    """Run `judge(case_run)` on the stored cases (the first `stored` of them when given) and on the
    fresh one; catch an implementation that only knows the stored ones. A near miss (`Fail.near`)
    does not stop the judging: a later case that fails by more is the one reported, and the check
    is near only if every failure was."""
    passed_stored = True
    runs = ctx.cases(case_name)
    if stored is not None:
        runs = [run for run in runs if not run.fresh][:stored] + [run for run in runs if run.fresh]
    first = None
    for run in runs:
        try:
            judge(run)
        except Fail as exc:
            if run.fresh and passed_stored and not exc.near:
                raise Fail(f"{run.label}: {exc} — the stored cases passed but fresh inputs do "
                           "not: an implementation that reads the expected values instead of "
                           "computing them gets no points for them") from None
            if not exc.near:
                raise Fail(f"{run.label}: {exc}") from None
            first = first or (run, exc)
        passed_stored = passed_stored and not run.fresh
    if first:
        raise Fail(f"{first[0].label}: {first[1]}", near=True)
