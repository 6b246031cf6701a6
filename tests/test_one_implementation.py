"""One implementation: each graded function's solution cell in solutions/ is the `course` function.

The solution notebook's `def` (found with ast in its code cells, nbgrader's `### BEGIN/END SOLUTION`
marker lines dropped) and `inspect.getsource` of the course function must parse to the same syntax
tree (same code, same docstring) and carry the same comments, in the same order. Only layout may
differ. The helpers a graded function calls are in the notebook as the course's own, in a locked
"given" cell that is what `instructor.one_implementation` makes now. `python -m
instructor.one_implementation --write` rewrites a differing solution cell and every given cell.
"""

import ast
import difflib
import inspect
import shutil
import textwrap

import nbformat
import pytest
import torch

import course
from instructor.one_implementation import (
    SOLUTIONS,
    differing,
    given_for,
    normalized,
    solution_sources,
    stale_given_cells,
    without_markers,
    write_solution_cells,
)


@pytest.fixture(scope="module")
def solutions():
    return solution_sources()


@pytest.mark.parametrize("name", course.GRADED_FUNCTIONS)
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
    # an edited solution cell and a lost given cell, in a copy of notebook 04
    path = tmp_path / "04_losses.ipynb"
    notebook = nbformat.read(path, as_version=4)
    notebook.cells = [c for c in notebook.cells if "def clipped_surrogate(" not in c.source]
    for cell in notebook.cells:
        if cell.source.startswith("def compute_policy_gradient_loss("):
            cell.source = cell.source.replace("### BEGIN SOLUTION", "### BEGIN SOLUTION\n    # an edit")
    nbformat.write(notebook, path)
    assert differing(tmp_path) == ["compute_policy_gradient_loss"]
    assert stale_given_cells(tmp_path) == [path.name]
    written = write_solution_cells(["compute_policy_gradient_loss"], tmp_path)
    assert written == [path] and differing(tmp_path) == []
    assert stale_given_cells(tmp_path) == []
    notebook = nbformat.read(path, as_version=4)
    sources = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    cell = next(s for s in sources if s.startswith("def compute_policy_gradient_loss("))
    docstring_end = cell.index('"""', cell.index('"""') + 3)
    assert cell.index("### BEGIN SOLUTION") > docstring_end and cell.rstrip().endswith("### END SOLUTION")
    # the loss core it calls is defined once, in a locked cell before it
    helpers = [i for i, s in enumerate(sources) if "def clipped_surrogate(" in s]
    assert len(helpers) == 1 and helpers[0] < sources.index(cell)
    assert write_solution_cells(["compute_policy_gradient_loss"], tmp_path) == []  # nothing twice
    again = nbformat.read(path, as_version=4)
    assert sum("def clipped_surrogate(" in c.source for c in again.cells) == 1


def test_every_given_cell_is_what_course_makes_now():
    assert stale_given_cells() == [], "run `python -m instructor.one_implementation --write`"


def test_given_cells_hold_the_closure_of_helpers_and_imports():
    from course.train_step import grpo_train_step

    imports, helpers = given_for(grpo_train_step, {"torch"})
    nodes = [ast.parse(source).body[0] for source in helpers]
    defined = {getattr(node, "name", None) or node.targets[0].id for node in nodes}
    # reached through other helpers: _validate -> _validate_penalties; a class and a constant
    assert {"_validate_penalties", "LossTerms", "ALIGNED_LOG_PROBS", "per_token_step_loss"} <= defined
    assert "grpo_train_step" not in defined and not defined & set(course.GRADED_FUNCTIONS)
    text = "\n".join(imports)
    assert "from course.metrics import LossStatistics" in text
    assert "import torch.distributed as dist" in text and "import contextlib" in text
    # classes and constants before the functions whose annotations name them
    kinds = [isinstance(node, ast.FunctionDef) for node in nodes]
    assert kinds == sorted(kinds)
    # a name the notebook already binds is not given again; a function's own locals are not globals
    imports, helpers = given_for(grpo_train_step, {"torch", "contextlib", "dist", "LossTerms"})
    assert "import contextlib" not in "\n".join(imports)
    assert not any("class LossTerms" in h for h in helpers)
    from course.aggregation import aggregate_loss_across_microbatch

    # `masked` is a local; the allowed values are their constant's
    assert given_for(aggregate_loss_across_microbatch, {"torch"}) == (
        ["from course.variants import LOSS_NORMALIZATIONS"], [])


def test_given_cells_run_and_define_what_the_step_needs():
    """Executing notebook 07's setup and given cells binds every global name the step reads."""
    import builtins

    from course.train_step import grpo_train_step

    notebook = nbformat.read(SOLUTIONS / "07_train_step.ipynb", as_version=4)
    namespace: dict = {}
    threads = torch.get_num_threads()  # the setup cell sets one thread
    try:
        for cell in notebook.cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") in ("07_setup", "given_grpo_train_step"):
                exec(compile(cell.source, "<cell>", "exec"), namespace)
    finally:
        torch.set_num_threads(threads)
    tree = ast.parse(textwrap.dedent(inspect.getsource(grpo_train_step)))
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    stored |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}  # its parameters
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    missing = {name for name in read - stored if name not in namespace and not hasattr(builtins, name)}
    assert missing == set(), missing
