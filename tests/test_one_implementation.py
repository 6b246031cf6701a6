"""One implementation: each graded function's solution cell in solutions/ is the `course` function.

The solution notebook's `def` (found with ast in its code cells, nbgrader's `### BEGIN/END SOLUTION`
marker lines dropped) and `inspect.getsource` of the course function must parse to the same syntax
tree (same code, same docstring) and carry the same comments, in the same order. Only layout may
differ. `python -m course.one_implementation --write` rewrites a differing cell from course.
"""

import difflib
import inspect
import shutil
import textwrap

import nbformat
import pytest

import course
from course.one_implementation import (
    SOLUTIONS,
    differing,
    normalized,
    solution_sources,
    without_markers,
    write_solution_cells,
)


@pytest.fixture(scope="module")
def solutions():
    return solution_sources()


# Not yet one implementation: course keeps optimizations the notebooks do not show yet. scoring's
# get_response_log_probs uses the one-buffer label log-prob autograd Function and the chunked head;
# train_step's grpo_train_step is split into named helpers (LossTerms, per_token_step_loss, ...)
# that notebook 06 does not define. Strict: the test says so the moment they agree.
NOT_YET_IDENTICAL = {"get_response_log_probs", "grpo_train_step"}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason="course keeps helpers the notebook lacks"))
    if name in NOT_YET_IDENTICAL else name for name in course.GRADED_FUNCTIONS])
def test_the_solution_cell_is_the_course_function(solutions, name):
    assert name in solutions, f"no solution notebook in solutions/ defines {name}"
    notebook_source, notebook = solutions[name]
    course_source = inspect.getsource(getattr(course, name))
    notebook_tree, notebook_comments = normalized(notebook_source)
    course_tree, course_comments = normalized(course_source)
    if (notebook_tree, notebook_comments) != (course_tree, course_comments):
        diff = "\n".join(difflib.unified_diff(
            textwrap.dedent(course_source).splitlines(), without_markers(notebook_source).splitlines(),
            f"course ({inspect.getsourcefile(getattr(course, name))})", f"solutions/{notebook}", lineterm=""))
        pytest.fail(f"{name} differs between course and solutions/{notebook}:\n{diff}")


def test_a_changed_comment_or_constant_is_a_difference():
    source = inspect.getsource(course.compute_rollout_rewards)
    assert normalized(source) == normalized(source.replace("\n", "\n\n", 3))  # layout is free
    assert normalized(source) != normalized(source + "    # a new comment\n")
    changed = source.replace("0", "1", 1) if "0" in source else source.replace("(", "( (", 1) + ")"
    assert normalized(source)[0] != normalized(changed)[0]


def test_write_makes_a_cell_the_course_function_with_its_helpers(tmp_path):
    for path in SOLUTIONS.glob("*.ipynb"):
        shutil.copy(path, tmp_path / path.name)
    written = write_solution_cells(["estimate_kl", "compute_policy_gradient_loss"], tmp_path)
    assert written and not {"estimate_kl", "compute_policy_gradient_loss"} & set(differing(tmp_path))
    notebook = nbformat.read(written[0], as_version=4)
    sources = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    cell = next(s for s in sources if s.startswith("def compute_policy_gradient_loss("))
    docstring_end = cell.index('"""', cell.index('"""') + 3)
    assert cell.index("### BEGIN SOLUTION") > docstring_end and cell.rstrip().endswith("### END SOLUTION")
    # the loss core it calls is defined once, in a cell before it
    helpers = [i for i, s in enumerate(sources) if "def clipped_surrogate(" in s]
    assert len(helpers) == 1 and helpers[0] < sources.index(cell)
    write_solution_cells(["compute_policy_gradient_loss"], tmp_path)  # again: nothing added twice
    again = nbformat.read(written[0], as_version=4)
    assert sum("def clipped_surrogate(" in c.source for c in again.cells) == 1
