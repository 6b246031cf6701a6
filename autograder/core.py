"""The trusted judging vocabulary: checks, cases with stored expected values, and comparisons.

A check is a named, pointed function of a `Context` (see `grader.py`) that either returns (full
points) or raises `Fail` with the reason (zero points). Comparisons know the common wrong answers:
`compare(got, expected, what, mistakes)` computes each mistake's answer from the same inputs and,
when the student's output matches one, says "this looks like X; fix: Y".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from autograder.reference import STAGE_OF

# Check names are test ids and results.json keys: keep them ASCII.
ASCII = str.maketrans({"−": "-", "·": "*", "π": "pi", "ε": "eps", "δ": "d", "Σ": "sum", "≤": "<="})


class Fail(Exception):
    """A check failed; the message is shown to the student."""


@dataclass
class Check:
    function: str
    title: str
    points: float
    run: Callable
    needs_cuda: bool = False

    @property
    def name(self) -> str:
        return f"{self.function}: {self.title}".translate(ASCII)

    @property
    def stage(self) -> str:
        return STAGE_OF[self.function]


@dataclass
class Case:
    """Inputs made from a seed, and the reference's answer for them (stored for `seeds`)."""

    name: str
    make: Callable[[int], dict]
    expected: Callable[[dict], object]
    seeds: tuple = (0, 1)


@dataclass
class Mistake:
    label: str
    fix: str
    answer: Callable[[], object]  # computes the wrong answer, lazily


CHECKS: list[Check] = []
CASES: dict[str, Case] = {}


def check(function: str, title: str, points: float = 1, needs_cuda: bool = False):
    def register(run):
        CHECKS.append(Check(function, title, points, run, needs_cuda))
        return run
    return register


def case(name: str, expected: Callable, seeds: tuple = (0, 1)):
    def register(make):
        CASES[name] = Case(name, make, expected, seeds)
        return make
    return register


def digest(value) -> str:
    """A stable fingerprint of case inputs, so stored expected values go stale loudly."""
    h = hashlib.sha256()

    def feed(v):
        if isinstance(v, torch.Tensor):
            h.update(f"T{v.dtype}{tuple(v.shape)}".encode())
            h.update(v.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        elif isinstance(v, dict):
            for k in sorted(v):
                h.update(f"K{k}".encode())
                feed(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(f"L{len(v)}".encode())
            for item in v:
                feed(item)
        else:
            h.update(f"V{v!r}".encode())

    feed(value)
    return h.hexdigest()[:16]


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


def _where(got: torch.Tensor, expected: torch.Tensor) -> str:
    g, e = got.detach().double(), expected.detach().double()
    error = (g - e).abs().nan_to_num(float("inf"))
    index = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape)) if error.ndim else ()
    return (f"largest difference {float(error.max()):.3g} at index {list(index)}: "
            f"got {float(g[index]):.6g}, expected {float(e[index]):.6g}")


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


def compare(got, expected: torch.Tensor, what: str, mistakes=(), rtol: float = 1e-7,
            atol: float = 1e-9) -> None:
    """Fail with a diagnosis unless `got` matches `expected` (a trusted tensor)."""
    got = tensor(got, what)
    if close(got, expected, rtol, atol):
        return
    hint = diagnose(got, mistakes, rtol, atol)
    if hint:
        raise Fail(f"{what} is wrong: {hint}")
    if tuple(got.shape) != tuple(expected.shape):
        raise Fail(f"{what} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    if got.dtype.is_floating_point and bool(torch.isnan(got).any()) and not bool(torch.isnan(expected).any()):
        raise Fail(f"{what} contains NaN where the expected values are finite")
    raise Fail(f"{what} does not match the reference: {_where(got, expected)}")


def scalar(got, what: str) -> float:
    if isinstance(got, bool):
        return float(got)
    if isinstance(got, (int, float)):
        return float(got)
    if type(got) is torch.Tensor and got.numel() == 1:
        return float(got.double().reshape(()))
    raise Fail(f"{what} should be a number or a 0-dim tensor, got "
               f"{type(got).__name__}{list(got.shape) if isinstance(got, torch.Tensor) else ''}")


def compare_scalar(got, expected: float, what: str, mistakes=(), rtol=1e-6, atol=1e-8) -> None:
    value = scalar(got, what)
    if abs(value - expected) <= atol + rtol * abs(expected):
        return
    hint = diagnose(torch.tensor(value, dtype=torch.float64), mistakes, rtol, atol)
    if hint:
        raise Fail(f"{what} is wrong: {hint}")
    raise Fail(f"{what} is {value:.6g}, expected {expected:.6g}")


def field(output, key: str, what: str):
    if not isinstance(output, dict) or key not in output:
        have = sorted(output) if isinstance(output, dict) else type(output).__name__
        raise Fail(f"{what} should contain {key!r}; got {have}")
    return output[key]


def item(output, index: int, length: int, what: str):
    if not isinstance(output, (list, tuple)) or len(output) != length:
        raise Fail(f"{what} should be a tuple of {length}, got "
                   f"{type(output).__name__}{'' if not isinstance(output, (list, tuple)) else f' of {len(output)}'}")
    return output[index]
