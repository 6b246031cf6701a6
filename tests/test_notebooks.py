"""The notebooks, run for real: Jupyter kernels (nbclient) and the nbgrader release/autograde workflow.

- every solutions/ notebook executes headless without error (its self-check cells included); the
  graded ones are executed once, by nbgrader autograde, and the other tests read its output;
- every notebooks/ notebook runs up to its first student cell (the graded ones: read from nbgrader's
  autograde of the blank release);
- notebooks/ is byte for byte what `python -m instructor.release` makes from solutions/;
- nbgrader (generate_assignment, autograde with the sqlite gradebook) gives the solutions full marks
  and the blank release zero (tests/test_autograder.py grades the same folders: every function of
  solutions/ a pasted copy of the reference, as solutions/ is `course` text for text);
- the notebooks' nbgrader metadata is what nbgrader and the autograder rely on;
- no notebook calls the reference of its own stage, and one that imports an earlier stage from
  `course` rebinds it with `earlier_stages` (a student edition stubs unrevealed references);
- every notebook teaches the same way: a predict-then-run question, a common-mistakes cell that is
  what `instructor.mistakes` writes from the autograder's checks, a recap, arXiv references, code lines
  of at most 88 characters, plot text of 10 pt and up with labelled y-axes;
- `python -m instructor.release --html` writes pages that load nothing from the network and show math.

The kernel is this interpreter (`sys.executable`), whatever kernelspecs the machine has: a
throw-away `python3` kernelspec is put first on JUPYTER_PATH, and the repository on PYTHONPATH, for
the kernels and for the nbgrader subprocesses. Nothing has to be installed beyond the project's
dependencies.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import course
from course.registry import REGISTRY, WRITTEN
from instructor.mistakes import CHECKS_DIR, TAG, stale_notebooks, write_sections
from instructor.nbgrader_release import ASSIGNMENT, nbgrader_environment, stale_files

REPO_ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO_ROOT / "solutions"
NOTEBOOKS = REPO_ROOT / "notebooks"
SOLUTION_NAMES = sorted(p.name for p in SOLUTIONS.glob("*.ipynb"))
CELL_TIMEOUT_S = 900  # the end-to-end notebook trains for a couple of minutes in one cell
# notebook 08's run, and the 2 steps its tests train instead: the recorded reference run is the
# 60 steps' (tests/test_implementations.py), so a shorter run trains the reference live
NOTEBOOK_08_RUN = "steps=60, eval_every=20, eval_problems=200, eval_samples=2"
NOTEBOOK_08_SHORT = "steps=2, eval_every=2, eval_problems=8, eval_samples=1"
# its written experiments (two seeds, 25 to 50 steps each: minutes), and the 2 steps of one seed
# their tests train (benchmarks/bench_experiments.py runs them whole)
NOTEBOOK_08_EXPERIMENTS = ("experiment_seeds = (0, 1)", "experiment_steps = None")
NOTEBOOK_08_EXPERIMENTS_SHORT = ("experiment_seeds = (0,)", "experiment_steps = 2")
# notebook 14's study (the solution's design: 2 arms x 3 seeds, minutes) and the 1 step of each
# of its six runs its tests train; the blank release has no design to shorten
NOTEBOOK_14_STUDY, NOTEBOOK_14_SHORT = "steps=30)", "steps=1, eval_problems=4)"
STUDENT = "student"


def shorten_notebook_08(path: Path) -> None:
    """Notebook 08 at `path`, its run cut to NOTEBOOK_08_SHORT and its experiments to
    NOTEBOOK_08_EXPERIMENTS_SHORT."""
    text = path.read_text(encoding="utf-8")
    for long, short in zip((NOTEBOOK_08_RUN, *NOTEBOOK_08_EXPERIMENTS),
                           (NOTEBOOK_08_SHORT, *NOTEBOOK_08_EXPERIMENTS_SHORT)):
        assert text.count(long) == 1, long
        text = text.replace(long, short)
    path.write_text(text, encoding="utf-8")


def shorten(path: Path) -> None:
    """The notebook at `path` with its long runs cut short (notebooks 08 and 14)."""
    if path.name == "08_end_to_end.ipynb":
        shorten_notebook_08(path)
    elif path.name == "14_your_study.ipynb":
        text = path.read_text(encoding="utf-8")
        assert text.count(NOTEBOOK_14_STUDY) <= 1
        path.write_text(text.replace(NOTEBOOK_14_STUDY, NOTEBOOK_14_SHORT), encoding="utf-8")


def written_notebook(grade_id: str) -> str:
    """The notebook (its stem) that holds written answer `grade_id` of `WRITTEN`."""
    (name,) = [n for n in SOLUTION_NAMES if grade_id in (SOLUTIONS / n).read_text(encoding="utf-8")]
    return Path(name).stem


@pytest.fixture(scope="module")
def kernel_environment(tmp_path_factory):
    """Point Jupyter's `python3` kernel at this interpreter and make the repo importable, for the
    tests of one module (a later module's subprocesses, a student edition's venv for one, must
    not find this checkout first on PYTHONPATH)."""
    jupyter_path = tmp_path_factory.mktemp("jupyter_path")
    spec_dir = jupyter_path / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (tests)", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    saved = {key: os.environ.get(key) for key in ("JUPYTER_PATH", "PYTHONPATH", "MPLBACKEND")}
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, (str(jupyter_path), saved["JUPYTER_PATH"])))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), saved["PYTHONPATH"])))
    os.environ.pop("MPLBACKEND", None)  # let ipykernel use its inline backend
    yield dict(os.environ)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def execute(notebook: nbformat.NotebookNode, cwd: Path) -> float:
    """Run every cell in a fresh kernel; raise nbclient's CellExecutionError on the first error."""
    start = time.perf_counter()
    NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return time.perf_counter() - start


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def error_outputs(notebook) -> list[str]:
    return [f"cell {cell.get('id')}: {out.get('ename')}: {out.get('evalue')}"
            for cell in notebook.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def cell_seconds(cell) -> float:
    """Execution time nbclient recorded in the cell's metadata (0 if it has none)."""
    timing = cell.get("metadata", {}).get("execution", {})
    if "iopub.execute_input" not in timing or "shell.execute_reply" not in timing:
        return 0.0
    parse = lambda stamp: datetime.fromisoformat(stamp.replace("Z", "+00:00"))  # noqa: E731
    return (parse(timing["shell.execute_reply"]) - parse(timing["iopub.execute_input"])).total_seconds()


def graded_notebooks() -> list[str]:
    return [name for name in SOLUTION_NAMES
            if any(nbgrader_meta(c).get("grade") for c in nbformat.read(SOLUTIONS / name, 4).cells)]


# --- static: the metadata nbgrader and the autograder rely on ------------------------------------

def test_there_are_nine_notebooks_and_the_optional_ones_released():
    optional = ["10_real_model.ipynb", "11_frontier_losses.ipynb", "12_baselines.ipynb",
                "13_critic.ipynb", "14_your_study.ipynb"]
    assert SOLUTION_NAMES[9:] == optional, SOLUTION_NAMES
    assert SOLUTION_NAMES[7:9] == ["08_end_to_end.ipynb", "09_failure_lab.ipynb"], SOLUTION_NAMES
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == SOLUTION_NAMES


MAX_CELLS = 50  # one activity a notebook: more cells is two notebooks' worth


@pytest.mark.parametrize("name", SOLUTION_NAMES)
def test_a_notebook_holds_one_activity(name):
    assert len(nbformat.read(SOLUTIONS / name, as_version=4).cells) <= MAX_CELLS, name


@pytest.mark.parametrize("name", SOLUTION_NAMES)
def test_solution_notebook_metadata(name):
    notebook = nbformat.read(SOLUTIONS / name, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata["kernelspec"]["name"] == "python3"
    grade_ids = []
    for cell in notebook.cells:
        meta = nbgrader_meta(cell)
        assert cell.get("outputs", []) == [], f"{name}: cell {cell.id} is stored with outputs"
        if not meta:
            continue  # a free cell the student may edit
        grade_ids.append(meta["grade_id"])
        assert meta["schema_version"] == 3
        if meta["solution"] and meta["grade"]:  # a written answer, graded by a person
            assert cell.cell_type == "markdown" and not meta["locked"], cell.id
            assert meta["points"] == WRITTEN[meta["grade_id"]], cell.id
            assert "**Model answer.**" in cell.source and "**Rubric (" in cell.source, cell.id
        elif meta["solution"]:
            assert cell.cell_type == "code" and not meta["grade"] and not meta["locked"]
            source = cell.source
            assert source.count("### BEGIN SOLUTION") == 1 and source.count("### END SOLUTION") == 1
            # the signature and docstring stay outside the region, so the release keeps them
            assert re.search(r"^def \w+\(", source.split("### BEGIN SOLUTION")[0], re.M), cell.id
        elif meta["grade"]:
            assert meta["locked"] and meta["points"] > 0
            assert "self_check(" in cell.source, f"{name}: test cell {cell.id} does not run self_check"
        else:
            assert meta["locked"], f"{name}: read-only cell {cell.id} is not locked"
    assert len(grade_ids) == len(set(grade_ids)), f"{name}: duplicate grade_ids"


def test_every_graded_function_has_one_solution_cell_and_one_check():
    defined, checked = {}, {}
    for name in SOLUTION_NAMES:
        for cell in nbformat.read(SOLUTIONS / name, as_version=4).cells:
            meta = nbgrader_meta(cell)
            if meta.get("solution"):
                for function in re.findall(r"^def (\w+)\(", cell.source, re.M):
                    defined.setdefault(function, []).append(name)
            if meta.get("grade"):
                for target in re.findall(r"self_check\(\s*\"(\w+)\"", cell.source):
                    checked.setdefault(target, []).append(name)
    for function in course.GRADED_FUNCTIONS:
        assert len(defined.get(function, [])) == 1, f"{function} is defined in {defined.get(function)}"
        stage = next(key for key, names in course.STAGES.items() if function in names)
        covering = checked.get(function, []) + checked.get(stage, [])
        assert covering == defined[function], f"{function}: checked in {covering}, defined in {defined[function]}"


# --- static: what every notebook teaches with ------------------------------------------------------

def code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


@pytest.mark.parametrize("name", SOLUTION_NAMES)
def test_notebook_has_a_prediction_mistakes_recap_and_references(name):
    notebook = nbformat.read(SOLUTIONS / name, as_version=4)
    cells = notebook.cells
    # predict, then run: a question, a free cell for the guess, and a later cell that prints it
    asks = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "Predict, then run" in c.source]
    assert asks, f"{name} has no predict-then-run question"
    guess = cells[asks[0] + 1]
    assert guess.cell_type == "code" and not nbgrader_meta(guess) and "= None" in guess.source, guess.source
    guessed = re.findall(r"^(\w+) = None", guess.source, re.M)
    assert guessed and all(any(g in c.source for c in code_cells(notebook)[1:] if c is not guess) for g in guessed)
    tagged = [c for c in cells if TAG in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "Common mistakes" in tagged[0].source.split("\n")[0], name
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    assert re.search(r"^## \d+\. What (the next stage needs|you have)", text, re.M), f"{name} has no recap"
    assert "## References" in text and "](https://arxiv.org/abs/" in text, f"{name} has no arXiv links"
    numbers = [int(n) for n in re.findall(r"^## (\d+)\. ", text, re.M)]
    assert numbers == list(range(1, len(numbers) + 1)), f"{name}: sections numbered {numbers}"


@pytest.mark.parametrize("name", SOLUTION_NAMES)
def test_notebook_reads_well(name):
    """Code fits JupyterLab's width, plots are legible, and nothing points outside the repository."""
    notebook = nbformat.read(SOLUTIONS / name, as_version=4)
    for cell in code_cells(notebook):
        long = [line for line in cell.source.splitlines() if len(line) > 88]
        assert long == [], f"{name} cell {cell.id}: lines over 88 characters: {long}"
        small = [int(size) for size in re.findall(r"fontsize\s*=\s*(\d+)", cell.source) if int(size) < 10]
        assert small == [], f"{name} cell {cell.id}: plot text below 10 pt"
        if re.search(r"plt\.(subplots|figure)\(", cell.source):
            assert "ylabel" in cell.source, f"{name} cell {cell.id}: a plot without a y-axis label"
    setup = next(c for c in code_cells(notebook) if "import matplotlib" in c.source)
    assert "use_course_style()" in setup.source, f"{name}: plots not in the course style"
    assert "SPEC" not in json.dumps(notebook), f"{name} mentions SPEC"


@pytest.mark.parametrize("stage", REGISTRY, ids=lambda stage: stage.key)
def test_a_notebook_runs_on_earlier_stages_never_on_its_own_reference(stage):
    """A student edition stubs the reference of every stage it has not revealed. So a notebook
    never imports its own stage's graded functions from `course` (a prediction's answer is
    computed another way), and the earlier stages it imports from `course` are rebound, after
    the import, by `earlier_stages(<its stage>)`: the learner's own where not revealed."""
    own = set(stage.functions)
    earlier = {name for s in REGISTRY[:REGISTRY.index(stage)] for name in s.functions}
    imports_earlier, binds = [], []
    for index, cell in enumerate(code_cells(nbformat.read(SOLUTIONS / stage.notebook, 4))):
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "course":
                names = {alias.name for alias in node.names}
                assert not names & own, f"{stage.notebook} cell {cell.id} imports {names & own}"
                imports_earlier += [index] if names & earlier else []
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "earlier_stages":
                assert ast.literal_eval(node.args[0]) == stage.key, (stage.notebook, cell.id)
                binds.append(index)
    assert bool(binds) == bool(imports_earlier), (stage.notebook, imports_earlier, binds)
    assert not imports_earlier or min(binds) > min(imports_earlier), stage.notebook


def test_common_mistakes_cells_are_current():
    stale = stale_notebooks(SOLUTIONS)
    assert stale == [], f"common-mistakes cells out of date in {stale}: run `python -m instructor.release`"


def test_common_mistakes_follow_the_checks(tmp_path):
    """A mistake added to a check shows up, after the one command, in its stage's notebook only."""
    checks = tmp_path / "checks"
    shutil.copytree(CHECKS_DIR, checks)
    with (checks / "aggregation.py").open("a") as module:
        module.write('''

@check(FN, "an invented check", points=1)
def invented(ctx) -> None:
    compare_scalar(0.0, 1.0, "the loss", [
        Mistake("an invented mistake", "an invented fix", lambda: torch.zeros(()))])
''')
    solutions = tmp_path / "solutions"
    shutil.copytree(SOLUTIONS, solutions)
    stale = stale_notebooks(solutions, checks)
    assert "06_aggregation.ipynb" in stale and "01_tokenization.ipynb" not in stale, stale
    write_sections(solutions, checks)
    assert stale_notebooks(solutions, checks) == []
    cell = next(c for c in nbformat.read(solutions / "06_aggregation.ipynb", 4).cells
                if TAG in c.metadata.get("tags", []))
    assert "*an invented mistake*. Fix: an invented fix." in cell.source


def test_training_curves_are_legible(tmp_path):
    from matplotlib.text import Text

    from course.loop.plotting import COURSE_STYLE, PANELS, _training_curves

    keys = [key for _, _, panel in PANELS for key in panel]
    records = [{"step": step, **{key: 0.0 if key == "clip_fraction" else 0.1 * step for key in keys}}
               for step in range(1, 6)]
    import matplotlib

    with matplotlib.rc_context(COURSE_STYLE):
        figure = _training_curves(records, None)
    for axis in figure.axes:
        assert axis.get_ylabel(), f"panel {axis.get_title()!r} has no y-axis label"
    sizes = [t.get_fontsize() for t in figure.findobj(Text) if t.get_text()]
    assert sizes and min(sizes) >= 10, sorted(sizes)[:5]
    assert any("one update per rollout" in t.get_text() for t in figure.findobj(Text))


# --- executing the notebooks -----------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", SOLUTION_NAMES)
def test_solution_notebook_executes(name, request, kernel_environment, tmp_path, monkeypatch):
    """Every cell runs without error, self-check cells included.

    The graded notebooks are executed once, by `nbgrader autograde` of the solutions (nbgrader's
    Execute preprocessor is nbclient's NotebookClient, in a real kernel); here we read its output.
    The others run through nbclient directly. Both leave nothing in the temporary folder once their
    kernel has ended (a learner's /tmp is not a place to leave a trained model in).
    """
    if name in graded_notebooks():
        course_dir, _ = request.getfixturevalue("autograded_course")
        notebook = nbformat.read(course_dir / "autograded" / "solutions" / ASSIGNMENT / name, as_version=4)
        unexecuted = [c.id for c in notebook.cells if c.cell_type == "code" and c.execution_count is None]
        assert unexecuted == [], f"{name}: cells not executed: {unexecuted}"
        seconds = sum(cell_seconds(c) for c in notebook.cells)
    else:
        shutil.copytree(SOLUTIONS, tmp_path / "solutions")  # run beside its siblings, write nothing into the repo
        notebook = nbformat.read(tmp_path / "solutions" / name, as_version=4)
        (tmp_path / "tmp").mkdir()
        monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # the kernel's temporary folder
        seconds = execute(notebook, tmp_path / "solutions")
        left = [p.name for p in (tmp_path / "tmp").iterdir()
                if not p.name.startswith("torchinductor_")]  # torch's own cache, kept by design
        assert left == [], f"{name} left these in the temporary folder"
    print(f"\n{name}: cells executed in {seconds:.1f} s")
    assert error_outputs(notebook) == []
    for cell in notebook.cells:
        if nbgrader_meta(cell).get("grade") and cell.cell_type == "code":  # self-checks print a table
            assert any(out.get("output_type") == "stream" for out in cell.outputs), cell.id
    if name == "08_end_to_end.ipynb":  # graded (its written answers): autograde ran it shortened,
        # a run not the recorded one, so the reference trains live
        trained = next(c for c in notebook.cells if c.get("id") == "08_train")
        printed = "".join(out.get("text", "") for out in trained.outputs)
        assert "yours: 2 steps on cpu" in printed and "reference: 2 steps on cpu" in printed, printed
        assert "reference: held-out accuracy, greedy" in printed and "recorded" not in printed
    if name == "09_failure_lab.ipynb":  # the search and the reward exercise train, on the CPU
        printed = {c.get("id"): "".join(out.get("text", "") for out in c.outputs)
                   for c in code_cells(notebook)}
        assert "bracket: learns at" in printed["09_search"], printed["09_search"]
        assert "your reward: 0 holes" in printed["09_reward_holes"], printed["09_reward_holes"]
        assert "50 steps in" in printed["09_reward_run"], printed["09_reward_run"]
    if name == "14_your_study.ipynb":  # graded (its report): autograde ran the design shortened
        printed = {c.get("id"): "".join(out.get("text", "") for out in c.outputs)
                   for c in code_cells(notebook)}
        assert "[6/6] lr = 0.0003, seed 2: 1 steps in" in printed["14_run"], printed["14_run"]
        table = next(c for c in notebook.cells if c.get("id") == "14_table")
        shown = "".join(out.get("data", {}).get("text/markdown", "") for out in table.outputs)
        assert "| lr = 0.0001 | 3 |" in shown and "beyond the noise" in shown, shown
        assert any("image/png" in out.get("data", {}) for out in table.outputs)


@pytest.mark.parametrize("name", SOLUTION_NAMES)
@pytest.mark.slow
def test_release_notebook_runs_up_to_first_student_cell(name, request, kernel_environment, tmp_path):
    """The cells before the first student cell run without error. The graded notebooks were run
    whole by nbgrader's autograde of the blank release (student "blank"): here we read its output;
    the others run through nbclient up to that cell."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    first = next((i for i, c in enumerate(notebook.cells) if nbgrader_meta(c).get("solution")), None)
    assert first is not None, f"{name} has no student cell"
    assert "raise NotImplementedError()" in notebook.cells[first].source
    assert "BEGIN SOLUTION" not in json.dumps(notebook), f"{name} leaks a solution"
    if name in graded_notebooks():
        course_dir, _ = request.getfixturevalue("autograded_course")
        ran = nbformat.read(course_dir / "autograded" / "blank" / ASSIGNMENT / name, as_version=4)
        ran.cells = ran.cells[:first]
        assert [c.source for c in ran.cells] == [c.source for c in notebook.cells[:first]]
        unexecuted = [c.id for c in ran.cells if c.cell_type == "code" and c.execution_count is None]
        assert unexecuted == [], f"{name}: cells not executed: {unexecuted}"
        assert error_outputs(ran) == []
    else:
        notebook.cells = notebook.cells[:first]
        execute(notebook, tmp_path)


def test_failure_lab_runs_offline_from_the_recordings(kernel_environment, tmp_path, monkeypatch):
    """Notebook 09's lab cells alone, in a fresh kernel without network access to the hub: each
    mystery run draws its six-panel figure beside its control, and each check prints the run's
    name and numbers. (The whole notebook, its search and its reward run included, runs in
    test_solution_notebook_executes; reading the runs trains nothing.)"""
    notebook = nbformat.read(SOLUTIONS / "09_failure_lab.ipynb", as_version=4)
    notebook.cells = [c for c in notebook.cells if "failure-lab" in c.metadata.get("tags", [])]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    seconds = execute(notebook, tmp_path)
    print(f"\nthe failure-mode lab executed in {seconds:.1f} s")
    assert error_outputs(notebook) == []
    cells = code_cells(notebook)
    figures = [c for c in cells if c.source.startswith("show(")]
    assert len(figures) == 5 and all(any("image/png" in out.get("data", {}) for out in c.outputs)
                                     for c in figures)  # a panel per run, beside its control
    reveals = ["".join(out.get("text", "") for out in c.outputs) for c in cells
               if "check_guess(" in c.source]
    assert [re.search(r"is (\w+):", text).group(1) for text in reveals] == [
        "kl_strong", "high_lr", "no_baseline", "hackable_reward", "per_micro_batch"]
    assert all("steps with gradient 0" in text for text in reveals)
    assert "the bug weighs a token" in reveals[-1] and "checked against 'token'" in reveals[-1]
    assert "the warm start's median |weight|: 0.0155" in reveals[1]  # what Run B's reveal cites
    assert all("set guess_" in text and "set panel_" in text for text in reveals)  # unanswered


@pytest.mark.slow
def test_html_export_reads_offline(kernel_environment, tmp_path):
    """`python -m instructor.release --html` on notebook 01: math as MathML, no network URL for a script,
    a style sheet or a font, and the solution code replaced by the release's stub."""
    command = [sys.executable, "-m", "instructor.release", "--html", str(tmp_path), "--only", SOLUTION_NAMES[0]]
    run = subprocess.run(command, cwd=REPO_ROOT, env=kernel_environment, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    page = (tmp_path / SOLUTION_NAMES[0]).with_suffix(".html").read_text()
    remote = re.findall(r"<(?:script|link|img)[^>]*(?:src|href)=[\"']?https?://[^>]*>|url\(\s*[\"']?https?://[^)]*\)|"
                        r"@import\s+[\"']https?://[^;]*", page)
    assert remote == [], remote
    markdown = "\n".join(c.source for c in nbformat.read(SOLUTIONS / SOLUTION_NAMES[0], 4).cells
                          if c.cell_type == "markdown")
    spans = len(re.findall(r"\$\$.+?\$\$|\$.+?\$", markdown, re.S))
    assert spans > 5 and page.count("<math ") >= spans, (spans, page.count("<math "))
    assert "YOUR CODE HERE" in page and "NotImplementedError" in page and "BEGIN SOLUTION" not in page
    assert page.count("data:image/png;base64") >= 1  # the executed plot
    again = subprocess.run(command, cwd=REPO_ROOT, env=kernel_environment, capture_output=True, text=True)
    assert again.returncode != 0 and "--force" in again.stderr  # an existing page is never overwritten


@pytest.mark.slow
def test_release_is_what_nbgrader_makes_from_solutions():
    stale = stale_files(SOLUTIONS, NOTEBOOKS)
    assert stale == [], f"notebooks/ is out of date for {stale}: run `python -m instructor.release`"


@pytest.mark.slow
def test_release_drift_is_detected(tmp_path):
    """The drift check can fail: edit one solution notebook and it reports exactly that file."""
    solutions = tmp_path / "solutions"
    shutil.copytree(SOLUTIONS, solutions)
    edited = solutions / SOLUTION_NAMES[0]
    notebook = nbformat.read(edited, as_version=4)
    notebook.cells[0].source += "\n\nAn instructor's late edit."
    nbformat.write(notebook, edited)
    assert SOLUTION_NAMES[0] in stale_files(solutions, NOTEBOOKS)


# --- the nbgrader workflow ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def autograded_course(kernel_environment, tmp_path_factory):
    """A temporary nbgrader course: generate_assignment, then autograde two submissions of the
    graded notebooks: the solutions (student "solutions") and the blank release ("blank").
    Returns (course_dir, names of the graded notebooks)."""
    course_dir = tmp_path_factory.mktemp("nbgrader_course")
    (course_dir / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.Execute.timeout = {CELL_TIMEOUT_S}\n"  # nbgrader's default is 30 s per cell
    )
    names = graded_notebooks()
    source = course_dir / "source" / ASSIGNMENT
    source.mkdir(parents=True)
    for name in names:
        shutil.copyfile(SOLUTIONS / name, source / name)
        shorten(source / name)

    start = time.perf_counter()
    (course_dir / ".jupyter_config").mkdir()
    env = nbgrader_environment(course_dir / ".jupyter_config")  # no user config, repo importable
    env["TMPDIR"] = str(course_dir / "tmp")  # the kernels' temporary folder: left empty, or a test fails
    (course_dir / "tmp").mkdir()

    def nbgrader(*args):
        result = subprocess.run([sys.executable, "-m", "nbgrader", *args, f"--course-dir={course_dir}"],
                                cwd=course_dir, env=env, capture_output=True, text=True)
        assert result.returncode == 0, f"nbgrader {args}:\n{result.stdout}\n{result.stderr}"
        return result

    nbgrader("generate_assignment", ASSIGNMENT, "--force")
    for student, folder in (("solutions", SOLUTIONS), ("blank", NOTEBOOKS)):
        submitted = course_dir / "submitted" / student / ASSIGNMENT
        submitted.mkdir(parents=True)
        for name in names:
            shutil.copyfile(folder / name, submitted / name)
            shorten(submitted / name)
    nbgrader("autograde", ASSIGNMENT, "--force")
    left = [p.name for p in (course_dir / "tmp").iterdir()
            if not p.name.startswith("torchinductor_")]  # torch's own cache, kept by design
    assert left == [], f"the graded notebooks left these in the temporary folder: {left}"
    seconds = time.perf_counter() - start
    print(f"\nnbgrader generate_assignment + autograde of {len(names)} notebooks x 2 submissions: {seconds:.1f} s")
    return course_dir, names


def gradebook_scores(course_dir: Path, student: str, names: list[str]) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gradebook:
        return {name: (nb.score, nb.max_score)
                for name in names
                for nb in [gradebook.find_submission_notebook(Path(name).stem, ASSIGNMENT, student)]}


@pytest.mark.slow
def test_nbgrader_gives_the_solutions_full_marks(autograded_course):
    """The autograded part in full; the written answers wait for a person (nbgrader's formgrader),
    and once each is graded full, the notebook has full marks."""
    from nbgrader.api import Gradebook

    course_dir, names = autograded_course
    scores = gradebook_scores(course_dir, "solutions", names)
    assert all(maximum > 0 for _, maximum in scores.values()), scores
    written = {name: sum(WRITTEN[nbgrader_meta(cell)["grade_id"]]
                         for cell in nbformat.read(SOLUTIONS / name, 4).cells
                         if nbgrader_meta(cell).get("grade") and nbgrader_meta(cell).get("solution"))
               for name in names}
    assert sum(written.values()) == sum(WRITTEN.values())
    assert all(score == maximum - written[name] for name, (score, maximum) in scores.items()), scores
    kept = nbformat.read(course_dir / "autograded" / "solutions" / ASSIGNMENT / "08_end_to_end.ipynb", 4)
    answers = {cell.id: cell.source for cell in kept.cells if cell.id in WRITTEN}
    assert answers == {cell.id: cell.source for cell in nbformat.read(SOLUTIONS / "08_end_to_end.ipynb", 4).cells
                       if cell.id in WRITTEN}  # autograde keeps what was written
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gradebook:
        for grade_id in WRITTEN:
            grade = gradebook.find_grade(grade_id, written_notebook(grade_id), ASSIGNMENT,
                                         "solutions")
            assert grade.needs_manual_grade and grade.auto_score is None, grade_id
            grade.manual_score = grade.max_score  # what the instructor gives the model answer
        gradebook.db.commit()
    scores = gradebook_scores(course_dir, "solutions", names)
    assert all(score == maximum for score, maximum in scores.values()), scores


@pytest.mark.slow
def test_nbgrader_gives_the_blank_release_zero(autograded_course):
    """Zero, and an unanswered written answer needs no person: nbgrader scores it 0 itself."""
    from nbgrader.api import Gradebook

    course_dir, names = autograded_course
    scores = gradebook_scores(course_dir, "blank", names)
    assert all(maximum > 0 for _, maximum in scores.values()), scores
    assert all(score == 0 for score, _ in scores.values()), scores
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gradebook:
        for grade_id in WRITTEN:
            grade = gradebook.find_grade(grade_id, written_notebook(grade_id), ASSIGNMENT, "blank")
            assert not grade.needs_manual_grade and grade.score == 0, grade_id
