"""The checks run and are reported in course order: stage by stage, function by function, as
`course.registry` lists them (not alphabetically by module)."""

from autograder.trusted import checks  # noqa: F401  (registers the checks)
from autograder.trusted.core import CHECKS
from course.registry import GRADED_FUNCTIONS, REGISTRY, STAGE_OF


def test_checks_are_in_course_order():
    functions = list(dict.fromkeys(check.function for check in CHECKS))
    assert functions == list(GRADED_FUNCTIONS)
    stages = list(dict.fromkeys(STAGE_OF[check.function] for check in CHECKS))
    assert stages == [stage.key for stage in REGISTRY]
    first = [check.name for check in CHECKS if check.function == "get_response_log_probs"][0]
    assert "log_probs match the reference" in first  # a function's checks keep their module order
