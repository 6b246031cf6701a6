"""The checks, one module per stage, registered on import; then put in the order a learner
builds the stages (`course.registry`: stage, then function), each function's checks in the order
its module defines them, which is the order they run and are reported in."""

from autograder.trusted.checks import (  # noqa: F401  (imported for their registrations)
    advantages,
    aggregation,
    losses,
    off_policy,
    scoring,
    tokenization,
    train_step,
)
from autograder.trusted.core import CHECKS
from course.registry import GRADED_FUNCTIONS

CHECKS.sort(key=lambda check: GRADED_FUNCTIONS.index(check.function))  # stable: module order kept
