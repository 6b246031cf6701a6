"""course.registry is the one list of what is graded: the checks, `course` and the notebooks agree."""

import importlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

import course
from autograder.trusted import checks  # noqa: F401  (registers the checks)
from autograder.trusted.core import CHECKS
from course.registry import GRADED_FUNCTIONS, POINTS, REGISTRY, STAGE_OF, STAGES

ROOT = Path(__file__).resolve().parent.parent


def test_points_are_the_sum_of_each_functions_check_points():
    checked = Counter()
    for check in CHECKS:
        checked[check.function] += check.points
    assert dict(checked) == POINTS


def test_every_check_belongs_to_a_registered_function_and_stage():
    assert {check.function for check in CHECKS} == set(GRADED_FUNCTIONS)
    assert all(check.stage == STAGE_OF[check.function] for check in CHECKS)


def test_course_exports_the_registry_and_each_function_lives_in_its_stage_module():
    assert course.GRADED_FUNCTIONS == GRADED_FUNCTIONS and course.STAGES == STAGES
    for stage in REGISTRY:
        module = importlib.import_module(stage.module)
        for name in stage.functions:
            assert getattr(module, name).__module__ == stage.module, name
            assert getattr(course, name) is getattr(module, name), name


def _self_checked(notebook: Path) -> list[str]:
    """The names passed to `self_check("...")` in the notebook's code cells, in order."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    return re.findall(r'self_check\(\s*"([^"]+)"', "\n".join(sources))


def test_each_notebook_self_checks_exactly_its_stages_functions():
    for folder in ("solutions", "notebooks"):
        for stage in REGISTRY:
            checked = _self_checked(ROOT / folder / stage.notebook)
            assert checked == list(stage.functions), (folder, stage.notebook, checked)


def test_every_check_counts_on_every_device():
    """One maximum everywhere: no check is CUDA-only (the peak-GPU-memory bound rides on the
    any-device saved-bytes check), so a CPU grading, a GPU grading and a self-check agree."""
    assert [check.name for check in CHECKS if check.needs_cuda] == []
    assert sum(POINTS.values()) == 66


def test_solution_check_cells_carry_the_registry_points():
    """nbgrader's points per self-check cell are the autograder's points for its function, so
    `nbgrader autograde` and `pytest autograder` grade on one scale (instructor.release sets them)."""
    for stage in REGISTRY:
        notebook = json.loads((ROOT / "solutions" / stage.notebook).read_text(encoding="utf-8"))
        points = {}
        for cell in notebook["cells"]:
            meta = cell["metadata"].get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution"):
                (name,) = re.findall(r'self_check\(\s*"([^"]+)"', "".join(cell["source"]))
                points[name] = meta["points"]
        assert points == stage.functions, (stage.notebook, points)


def test_the_release_sets_the_registry_points_on_drifted_cells():
    import nbformat

    from instructor.nbgrader_release import registry_points

    notebook = nbformat.read(ROOT / "solutions" / REGISTRY[1].notebook, as_version=4)
    cells = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade")]
    for cell in cells:
        cell.metadata.nbgrader.points = 10
    assert registry_points(notebook) and not registry_points(notebook)
    assert [c.metadata.nbgrader.points for c in cells] == list(REGISTRY[1].functions.values())
    cells[0].source = 'self_check("not_a_function", globals())'
    with pytest.raises(ValueError, match="not_a_function"):
        registry_points(notebook)
