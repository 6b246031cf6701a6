"""Self-checks for notebook cells: `self_check("compute_entropy", globals())`.

Runs the autograder's checks for one graded function (or a stage key such as "2_scoring") against
the function defined in the notebook's namespace, prints check / points / diagnostic, and returns
the points earned as the cell's value. That makes the cell an nbgrader autograded test cell with
partial credit: nbgrader reads a code grade cell's score from the number its last expression shows
(`nbgrader.utils.determine_grade`), and gives 0 for an error or anything written to stderr, so
while the checks run, warnings and stderr (Python's and the file descriptor's) go to stdout.
Each cell's nbgrader points are its function's `course.registry.POINTS` (`instructor.release` sets
them), the same scale as `pytest autograder`.

This runs in the notebook's own kernel (`InProcessRunner`): fine for checking yourself, not
isolated. Grading uses `pytest autograder`, which runs the submission in a sandboxed process.
The data-parallel check forks its gloo ranks from the kernel; where there is no `os.fork`
(Windows) it is skipped, and says so.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections import Counter
from collections.abc import Iterator


class InProcessRunner:
    """Runs probes in this process against a namespace (the notebook's: untrusted, not isolated).

    Delegation to the reference is caught by counting calls into it while a probe runs."""

    def __init__(self, namespace: dict, device: str):
        from autograder.protocol.answers import function_status
        from autograder.trusted.reference import counting_calls, is_reference
        from autograder.untrusted.probes import submission_state
        from course.registry import GRADED_FUNCTIONS

        counter = Counter()
        functions = {name: namespace.get(name) for name in GRADED_FUNCTIONS}
        statuses = {name: function_status(function, is_reference(function, name))
                    for name, function in functions.items()}
        self.state = submission_state(functions, statuses, device, counter,
                                      patch=lambda: counting_calls(counter, [namespace]))
        self.ready = {"status": "ready", "statuses": statuses, "errors": []}

    def start(self) -> dict:
        return self.ready

    def request(self, message: dict, timeout: float) -> dict:
        from autograder.untrusted.probes import handle, to_plain

        return to_plain(handle(self.state, message))

    def close(self) -> None:
        pass


class SelfCheckScore(float):
    """The points a self-check earned: a float whose repr is the plain number, so that nbgrader
    reads it from the cell's output as partial credit; the check results ride along."""

    def __new__(cls, name: str, score: float, max_score: float, results: list) -> SelfCheckScore:
        value = super().__new__(cls, score)
        value.name, value.max_score, value.results = name, max_score, results
        return value

    @property
    def score(self) -> float:
        return float(self)

    def __repr__(self) -> str:
        return repr(float(self))


@contextlib.contextmanager
def stderr_to_stdout() -> Iterator[None]:
    """Send warnings and stderr to stdout: nbgrader zeroes a cell that writes to stderr, and a stray
    library warning is not a failed check. The file descriptor moves too (the Jupyter kernel sends
    what is written to fd 2 as stderr, and forked data-parallel ranks inherit it)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = _dup(2)
    if saved is not None:
        os.dup2(1, 2)
    try:
        with contextlib.redirect_stderr(sys.stdout), warnings.catch_warnings():
            warnings.showwarning = _warning_to_stdout
            yield
    finally:
        sys.stdout.flush()
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)


def _dup(fd: int) -> int | None:
    try:
        return os.dup(fd)
    except OSError:  # no such descriptor (an embedded interpreter): Python's streams only
        return None


def _warning_to_stdout(message, category, filename, lineno, file=None, line=None) -> None:
    print(warnings.formatwarning(message, category, filename, lineno, line), end="",
          file=sys.stdout)


def self_check(name: str, namespace: dict, device: str = "cpu",
               seed: int | None = None) -> SelfCheckScore:
    """Run the checks of graded function (or stage) `name` on `namespace`'s functions, print the
    table, and return the points earned (a float that also carries `max_score` and `results`)."""
    from autograder.options import GradingOptions
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
        raise ValueError(f"self_check: unknown function or stage {name!r}; expected one of "
                         f"{GRADED_FUNCTIONS} or {tuple(STAGES)}")
    if not isinstance(namespace, dict):
        raise TypeError(f"self_check: namespace must be a dict such as globals(), got "
                        f"{type(namespace).__name__}")
    selected = [c for c in CHECKS if c.function in functions]
    grader = Grader(None, GradingOptions(device=device, seed=seed),
                    runner=InProcessRunner(namespace, device))
    try:
        with stderr_to_stdout():
            results = [grader.run_check(c) for c in selected]
    finally:
        grader.close()
    for line in check_table(results):
        print(line)
    score = sum(r["score"] for r in results)
    maximum = sum(r["max_score"] for r in results)
    print(f"{name}: {score:g}/{maximum:g} points")
    return SelfCheckScore(name, score, maximum, results)
