"""One scale of points: `nbgrader autograde` of a notebook gives what `pytest autograder` gives it.

- `self_check` (the notebooks' check cells) returns its points as the cell's value, a float whose
  repr is the plain number: nbgrader reads it as partial credit (`nbgrader.utils.determine_grade`),
  and gives 0 for an error or a stderr stream, so warnings and stderr go to stdout while checks run;
- each check cell's nbgrader points are `course.registry.POINTS` of its function (tests/test_registry.py);
- with the real nbgrader CLI: a course in tmp_path, `generate_assignment`, two submissions (the
  solutions of two fast notebooks, and one of them with a graded function made buggy), `autograde`,
  the real gradebook, compared notebook by notebook with `pytest autograder --results`;
- the data-parallel check runs in a real Jupyter kernel (forked gloo ranks), passes for notebook
  07's solution, fails for a mutant, and leaves nothing behind; without os.fork it is skipped.

The kernels and nbgrader run without PYTEST_CURRENT_TEST in their environment, so that ipykernel
sends what is written to file descriptor 2 as a stderr stream, as it does for a student.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from test_notebooks import gradebook_scores, kernel_environment, nbgrader_meta  # noqa: F401

from autograder.selfcheck import SelfCheckScore, self_check
from course.registry import POINTS, REGISTRY, STAGES
from instructor.nbgrader_release import ASSIGNMENT, NBGRADER_CONFIG, run_nbgrader

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
CASES = ROOT / "tests" / "autograder_cases"
STAGE_OF_NOTEBOOK = {stage.notebook: stage.key for stage in REGISTRY}
FAST = ("03_advantages.ipynb", "06_aggregation.ipynb")
# notebook 03 with the population std (divides by G) instead of the unbiased one: a real bug that
# loses the std-normalization points of compute_group_normalized_rewards and keeps the others
UNBIASED = "grouped.std(dim=1, keepdim=True)"
BIASED = "grouped.std(dim=1, keepdim=True, correction=0)"


def _impl(bug: str = "") -> dict:
    sys.path.insert(0, str(CASES))
    try:
        from _impl import build
    finally:
        sys.path.remove(str(CASES))
    return build(bug)


@contextlib.contextmanager
def as_a_student_runs_it():
    """Kernels started here capture fd 2 as a stderr stream (ipykernel skips that under pytest)."""
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved


# --- self_check in this process ----------------------------------------------------------------

def test_self_check_returns_partial_credit_as_a_plain_number(capsys):
    from IPython.core.formatters import PlainTextFormatter

    full = self_check("3_advantages", _impl())
    assert isinstance(full, SelfCheckScore) and full == full.max_score == sum(
        POINTS[name] for name in STAGES["3_advantages"])
    partial = self_check("compute_entropy", _impl("naive_entropy"))
    assert 0 < partial < partial.max_score == POINTS["compute_entropy"]
    out = capsys.readouterr().out
    assert "FAIL" in out and "logsumexp" in out  # the diagnosis, as before
    assert f"compute_entropy: {float(partial):g}/4 points" in out
    # what Jupyter shows as the cell's value, and nbgrader reads back with float()
    assert PlainTextFormatter()(partial) == repr(partial) == repr(float(partial))
    failed = [r for r in partial.results if r["status"] == "failed"]
    assert failed and sum(r["max_score"] - r["score"] for r in failed) == partial.max_score - partial


def test_self_check_of_the_reference_itself_scores_zero():
    import course

    score = self_check("compute_entropy", {"compute_entropy": course.compute_entropy})
    assert score == 0 and score.max_score == POINTS["compute_entropy"]
    assert all("reference" in r["output"] for r in score.results), score.results


def test_self_check_names_a_bad_argument():
    with pytest.raises(ValueError, match="unknown function or stage 'compute_entropi'"):
        self_check("compute_entropi", {})
    with pytest.raises(TypeError, match="namespace must be a dict"):
        self_check("compute_entropy", None)


def test_warnings_and_stderr_go_to_stdout_while_checks_run(capfd):
    correct = _impl()["compute_rollout_rewards"]

    def noisy(*args, **kwargs):
        warnings.warn("a stray library warning", UserWarning, stacklevel=1)
        print("python stderr", file=sys.stderr)
        os.write(2, b"fd 2\n")  # C++ code (torch, gloo) writes here
        return correct(*args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        score = self_check("compute_rollout_rewards", {"compute_rollout_rewards": noisy})
    captured = capfd.readouterr()
    assert score == score.max_score > 0
    assert captured.err == ""
    assert "a stray library warning" in captured.out and "python stderr" in captured.out
    assert "fd 2" in captured.out
    os.write(2, b"after\n")  # stderr is itself again afterwards
    print("after", file=sys.stderr)
    assert capfd.readouterr().err == "after\nafter\n"


@pytest.mark.slow
def test_without_fork_the_data_parallel_check_is_skipped_and_says_so(monkeypatch, capsys):
    monkeypatch.delattr(os, "fork")
    score = self_check("grpo_train_step", _impl())
    (skipped,) = [r for r in score.results if r["status"] == "skipped"]
    assert "data-parallel" in skipped["name"] and "no os.fork" in skipped["output"]
    assert score == score.max_score == POINTS["grpo_train_step"] - 2
    assert "SKIP" in capsys.readouterr().out


# --- points per cell from the registry ----------------------------------------------------------

@pytest.mark.slow
def test_the_release_takes_the_points_from_the_registry_not_the_solutions(tmp_path):
    """A solution notebook whose check cells drifted (10 points each, the old scale) is released
    with the registry's points: the release cannot drift from `pytest autograder`."""
    from instructor.nbgrader_release import generate_release

    solutions = tmp_path / "solutions"
    solutions.mkdir()
    notebook = nbformat.read(SOLUTIONS / FAST[0], as_version=4)
    for cell in notebook.cells:
        if nbgrader_meta(cell).get("grade"):
            cell.metadata.nbgrader.points = 10
    nbformat.write(notebook, solutions / FAST[0])
    (released,) = generate_release(solutions, tmp_path / "release")
    points = {cell.source.split('"')[1]: nbgrader_meta(cell)["points"]
              for cell in nbformat.read(released, as_version=4).cells if nbgrader_meta(cell).get("grade")}
    assert points == {name: POINTS[name] for name in STAGES[STAGE_OF_NOTEBOOK[FAST[0]]]}


# --- the data-parallel check in a real kernel ----------------------------------------------------

def _check_cell(notebook) -> nbformat.NotebookNode:
    (cell,) = [c for c in notebook.cells if nbgrader_meta(c).get("grade")]
    return cell


def _cell_value(cell) -> float:
    (result,) = [o for o in cell.outputs if o.output_type == "execute_result"]
    return float(result.data["text/plain"])


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("bug", ["", "ddp_no_world_scale"])
def test_data_parallel_check_runs_in_the_kernel(bug, kernel_environment, tmp_path, monkeypatch):  # noqa: F811
    """Notebook 07 in a Jupyter kernel: its solution, or the same notebook whose train step is a
    mutant that forgets DDP's world-size scaling. The ranks are forked from the kernel; their
    store goes in a temporary folder, and nothing is left in the notebook's folder or there."""
    name = "07_train_step.ipynb"
    notebook = nbformat.read(SOLUTIONS / name, as_version=4)
    if bug:
        (solution,) = [c for c in notebook.cells if nbgrader_meta(c).get("solution")
                       and "def grpo_train_step(" in c.source]  # not the ungraded decision cell
        solution.source = (f"import sys\nsys.path.insert(0, {str(CASES)!r})\nfrom _impl import build\n\n"
                           f"grpo_train_step = build({bug!r})['grpo_train_step']")
    work, temporary = tmp_path / "work", tmp_path / "tmp"
    shutil.copytree(SOLUTIONS, work)
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    before = sorted(p.name for p in work.iterdir())
    with as_a_student_runs_it():  # like nbgrader autograde, run on past errors of other cells
        NotebookClient(notebook, timeout=600, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(work)}}).execute()
    cell = _check_cell(notebook)
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    assert {o.name for o in cell.outputs if o.output_type == "stream"} == {"stdout"}, cell.outputs
    (line,) = [line for line in text.splitlines() if "data-parallel" in line]
    if bug:
        assert line.startswith("FAIL") and "world size" in text, text
        assert _cell_value(cell) == POINTS["grpo_train_step"] - 2
    else:
        assert line.startswith("PASS"), text
        assert _cell_value(cell) == POINTS["grpo_train_step"]
    assert sorted(p.name for p in work.iterdir()) == before
    assert [p.name for p in temporary.iterdir() if "ddp" in p.name] == []


# --- nbgrader autograde against pytest autograder ------------------------------------------------

def _mutant(notebook_path: Path) -> str:
    """The notebook's JSON with one graded function made buggy (not the reference's text)."""
    text = notebook_path.read_text(encoding="utf-8")
    assert text.count(UNBIASED) == 1
    return text.replace(UNBIASED, BIASED)


@pytest.fixture(scope="module")
def autograded(kernel_environment, tmp_path_factory):  # noqa: F811
    """An nbgrader course: the fast solution notebooks as source, submitted by "solutions" as they
    are and by "mutant" with notebook 03's group std made biased. Returns the course folder."""
    course_dir = tmp_path_factory.mktemp("points_course")
    (course_dir / "nbgrader_config.py").write_text(NBGRADER_CONFIG + "c.Execute.timeout = 600\n")
    source = course_dir / "source" / ASSIGNMENT
    source.mkdir(parents=True)
    for name in FAST:
        shutil.copyfile(SOLUTIONS / name, source / name)
    with as_a_student_runs_it():
        run_nbgrader(["generate_assignment", ASSIGNMENT, "--force"], course_dir)
        for student in ("solutions", "mutant"):
            submitted = course_dir / "submitted" / student / ASSIGNMENT
            submitted.mkdir(parents=True)
            for name in FAST:
                shutil.copyfile(SOLUTIONS / name, submitted / name)
        (course_dir / "submitted" / "mutant" / ASSIGNMENT / FAST[0]).write_text(
            _mutant(SOLUTIONS / FAST[0]), encoding="utf-8")
        run_nbgrader(["autograde", ASSIGNMENT, "--force"], course_dir)
    return course_dir


def _autograder_stage_scores(folder: Path, tmp_path: Path, env: dict) -> dict[str, tuple[float, float]]:
    """`pytest autograder` of a submitted folder, the checks of its notebooks' stages selected with
    -k (as a grader who grades those stages does): {notebook: (score, max) summed over its stage}."""
    results = tmp_path / f"{folder.parent.name}.json"
    stages = {name: STAGES[STAGE_OF_NOTEBOOK[name]] for name in FAST}
    command = [sys.executable, "-m", "pytest", "autograder", "--submission", str(folder),
               "--results", str(results), "--allow-reference", "-p", "no:cacheprovider", "-q",
               "-k", " or ".join(f for functions in stages.values() for f in functions)]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert results.exists(), f"no results.json:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    tests = json.loads(results.read_text())["tests"]
    return {name: (sum(t["score"] for t in tests if t["name"].split(":")[0] in functions),
                   sum(t["max_score"] for t in tests if t["name"].split(":")[0] in functions))
            for name, functions in stages.items()}


@pytest.mark.slow
@pytest.mark.parametrize("student", ["solutions", "mutant"])
def test_nbgrader_and_pytest_autograder_give_the_same_points(student, autograded, kernel_environment,  # noqa: F811
                                                             tmp_path):
    scores = gradebook_scores(autograded, student, list(FAST))
    graded = _autograder_stage_scores(autograded / "submitted" / student / ASSIGNMENT, tmp_path,
                                      kernel_environment)
    for name in FAST:
        nbgrader_score, nbgrader_max = scores[name]
        expected_max = sum(POINTS[f] for f in STAGES[STAGE_OF_NOTEBOOK[name]])
        assert nbgrader_max == expected_max, (name, nbgrader_max)
        assert graded[name] == (nbgrader_score, nbgrader_max), name
        if student == "mutant" and name == FAST[0]:
            assert 0 < nbgrader_score < nbgrader_max, nbgrader_score
        else:
            assert nbgrader_score == nbgrader_max, (name, nbgrader_score)


@pytest.mark.slow
def test_autograded_check_cells_write_nothing_to_stderr(autograded):
    """nbgrader gives a check cell that writes to stderr 0 points: none of them does."""
    for student in ("solutions", "mutant"):
        for name in FAST:
            notebook = nbformat.read(autograded / "autograded" / student / ASSIGNMENT / name, 4)
            for cell in notebook.cells:
                if nbgrader_meta(cell).get("grade"):
                    kinds = [(o.output_type, o.get("name")) for o in cell.outputs]
                    assert kinds[-1][0] == "execute_result" and ("stream", "stderr") not in kinds, kinds
