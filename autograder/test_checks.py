"""One pytest test per check: `pytest autograder -k tokenize` selects by check name.

Nothing is written while the checks run: results.json is written once, whole, when the session
finishes with every selected check judged (autograder/conftest.py), so a grader killed midway
leaves no file that could pass for a grade."""

import pytest

from autograder.trusted import checks  # noqa: F401  (registers the checks)
from autograder.trusted.core import CHECKS
from autograder.trusted.report import escape


def _param(check):
    marks = [pytest.mark.gpu] if check.needs_cuda else []
    return pytest.param(check, id=check.name, marks=marks)


@pytest.mark.parametrize("check", [_param(c) for c in CHECKS])
def test_check(check, grading) -> None:
    result = grading.grader.run_check(check)
    if result["status"] == "skipped":
        pytest.skip(result["output"])
    if result["status"] == "failed":
        pytest.fail(f"{result['score']:g}/{result['max_score']:g} points: "
                    f"{escape(result['output'])}",
                    pytrace=False)
