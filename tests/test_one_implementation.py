"""One implementation: each graded function's solution cell in solutions/ is the `course` function.

The solution notebook's `def` (found with ast in its code cells, nbgrader's `### BEGIN/END SOLUTION`
marker lines dropped) and `inspect.getsource` of the course function must parse to the same syntax
tree (same code, same docstring) and carry the same comments, in the same order. Only layout may
differ (line breaks and indentation of a notebook formatted for a narrower page).
"""

import ast
import difflib
import inspect
import io
import json
import textwrap
import tokenize
from pathlib import Path

import pytest

import course

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def _without_markers(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if line.strip() not in MARKERS)


def solution_sources() -> dict[str, tuple[str, str]]:
    """{graded function name: (its source in the solution notebook, the notebook's name)}."""
    found = {}
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = _without_markers("".join(cell["source"]))
            try:
                tree = ast.parse(source)
            except SyntaxError:  # a cell with IPython magics defines no graded function
                continue
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name in course.GRADED_FUNCTIONS:
                    found[node.name] = (ast.get_source_segment(source, node), path.name)
    return found


def normalized(source: str) -> tuple[str, list[str]]:
    """(the syntax tree, the comments) of one function's source: what must be equal."""
    source = textwrap.dedent(_without_markers(source))
    comments = [token.string for token in tokenize.generate_tokens(io.StringIO(source).readline)
                if token.type == tokenize.COMMENT]
    return ast.dump(ast.parse(source), indent=1), comments


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
            textwrap.dedent(course_source).splitlines(), _without_markers(notebook_source).splitlines(),
            f"course ({inspect.getsourcefile(getattr(course, name))})", f"solutions/{notebook}", lineterm=""))
        pytest.fail(f"{name} differs between course and solutions/{notebook}:\n{diff}")


def test_a_changed_comment_or_constant_is_a_difference():
    source = inspect.getsource(course.compute_rollout_rewards)
    assert normalized(source) == normalized(source.replace("\n", "\n\n", 3))  # layout is free
    assert normalized(source) != normalized(source + "    # a new comment\n")
    changed = source.replace("0", "1", 1) if "0" in source else source.replace("(", "( (", 1) + ")"
    assert normalized(source)[0] != normalized(changed)[0]
