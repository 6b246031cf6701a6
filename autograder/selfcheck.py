"""Self-checks for notebook cells: `self_check("compute_entropy", globals())`.

Runs the autograder's checks for one graded function (or a stage key such as "2_scoring") against
the function defined in the notebook's namespace, prints check / points / diagnostic, and raises
AssertionError listing the failed checks, so the cell doubles as an nbgrader autograded test cell.

This runs in the notebook's own kernel (`InProcessRunner`): fine for checking yourself, not
isolated. Grading uses `pytest autograder`, which runs the submission in a sandboxed process.
Checks that fork processes (`needs_processes`) and GPU-only checks are left to the grader.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


class InProcessRunner:
    """Runs probes in this process against a namespace (the notebook's: untrusted, not isolated).

    Delegation to the reference is caught by counting calls into it while a probe runs."""

    def __init__(self, namespace: dict, device: str):
        from autograder.protocol.answers import function_status
        from autograder.trusted.reference import counting_calls, is_reference
        from autograder.untrusted.probes import SubmissionState
        from course.registry import GRADED_FUNCTIONS

        counter = Counter()
        functions = {name: namespace.get(name) for name in GRADED_FUNCTIONS}
        statuses = {name: function_status(function, is_reference(function, name))
                    for name, function in functions.items()}
        self.state = SubmissionState(functions, statuses, device, counter,
                                     patch=lambda: counting_calls(counter, [namespace]))
        self.ready = {"status": "ready", "statuses": statuses, "errors": []}

    def start(self) -> dict:
        return self.ready

    def request(self, message: dict, timeout: float) -> dict:
        from autograder.untrusted.probes import handle, to_plain

        return to_plain(handle(self.state, message))

    def close(self) -> None:
        pass


@dataclass
class SelfCheckSummary:
    name: str
    score: float
    max_score: float
    results: list

    def __repr__(self) -> str:
        return f"SelfCheckSummary({self.name!r}: {self.score:g}/{self.max_score:g})"


def self_check(name: str, namespace: dict, device: str = "cpu", seed: int | None = None) -> SelfCheckSummary:
    from autograder.trusted import checks  # noqa: F401  (registers the checks)
    from autograder.trusted.core import CHECKS
    from autograder.trusted.grader import Grader
    from autograder.trusted.report import check_table
    from course.registry import GRADED_FUNCTIONS, STAGES

    if name in STAGES:
        functions = STAGES[name]
    elif name in GRADED_FUNCTIONS:
        functions = (name,)
    else:
        raise ValueError(f"unknown function or stage {name!r}; expected one of {GRADED_FUNCTIONS} or {tuple(STAGES)}")
    selected = [c for c in CHECKS if c.function in functions and not c.needs_cuda
                and not c.needs_processes]
    grader = Grader(None, device=device, seed=seed, namespace=namespace)
    try:
        results = [grader.run_check(c) for c in selected]
    finally:
        grader.close()
    for line in check_table(results):
        print(line)
    score = sum(r["score"] for r in results)
    maximum = sum(r["max_score"] for r in results)
    print(f"{name}: {score:g}/{maximum:g} points")
    failed = [r["name"] for r in results if r["status"] == "failed"]
    if failed:
        raise AssertionError(f"{len(failed)} check(s) failed: " + "; ".join(failed))
    return SelfCheckSummary(name, score, maximum, results)
