"""The student edition (`python -m instructor.release --student-edition DIR --reveal 1,2`): it holds no
code of an unrevealed stage's reference, installs, and grades from stored cases alone (a practice
grade), where blank notebooks score 0 and the reference scores full marks of what is gradable.
Its notebooks and `python -m course.train` run on the learner's own stages where a stage is not
revealed (real kernels, nbclient), and notebook 08 compares with the recorded reference run."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from test_notebooks import shorten_notebook_08

from autograder.trusted.reference import FLAG_AT, reference_prints
from autograder.trusted.similarity import containment, kgrams, tokens
from course.lab.reference_run import RECORDED
from course.paths import ROOT as REPO_ROOT
from course.registry import HOME_MODULES, REGISTRY, STAGE_MODULES, STAGE_NAMED
from instructor.edition import EDITION_PAGES
from instructor.release import main as release

REVEALED = ("1_tokenization", "2_scoring")
UNREVEALED = [name for stage in REGISTRY if stage.key not in REVEALED for name in stage.functions]
PRACTICE = "PRACTICE grade (stored cases only)"


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("edition") / "grpo"
    assert release(["--student-edition", str(folder), "--reveal", "1,2"]) == 0
    return folder


@pytest.fixture(scope="module")
def installed(edition, tmp_path_factory) -> Path:
    """A venv where `pip install -e` put the edition: its python. The venv sees this environment's
    packages through a .pth file (no downloads), not this checkout's editable install."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "course_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # this environment's setuptools builds it where there is one (Python >= 3.12 venvs have none)
    offline = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    *offline, "-e", str(edition)], check=True, capture_output=True)
    return python


def test_every_page_a_notebook_names_is_in_the_edition(edition):
    named = {page for notebook in (edition / "notebooks").glob("*.ipynb")
             for page in re.findall(r"(?:docs|benchmarks)/[\w./-]+\.md", notebook.read_text(encoding="utf-8"))}
    assert named and named <= set(EDITION_PAGES), named
    assert [page for page in EDITION_PAGES if not (edition / page).is_file()] == []


def _copy_edition(edition: Path, tmp_path: Path, *solutions: str) -> Path:
    """A copy of `edition` whose notebooks `solutions` (file names) are the solution notebooks:
    the learner's finished work; the other notebooks stay blank."""
    copy = tmp_path / "grpo"
    shutil.copytree(edition, copy, ignore=shutil.ignore_patterns("*.egg-info"))
    for name in solutions:
        shutil.copyfile(REPO_ROOT / "solutions" / name, copy / "notebooks" / name)
    return copy


def _execute(edition: Path, name: str, tmp_path: Path, monkeypatch, until: str | None = None):
    """Run the edition's notebook `name` (up to and with the cell `until`) in a real kernel of
    this interpreter that imports the edition's `course` first, in notebooks/ as a learner does.
    Returns the executed notebook; a failing cell leaves an error output, not an exception."""
    spec = tmp_path / "jupyter" / "kernels" / "edition"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "the edition", "language": "python", "env": {"PYTHONPATH": str(edition)}}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend
    notebook = nbformat.read(edition / "notebooks" / name, 4)
    if until is not None:
        notebook.cells = notebook.cells[:[c.id for c in notebook.cells].index(until) + 1]
    NotebookClient(notebook, timeout=600, kernel_name="edition", allow_errors=True,
                   resources={"metadata": {"path": str(edition / "notebooks")}}).execute()
    return notebook


def _printed(notebook, cell_id: str) -> str:
    cell = next(c for c in notebook.cells if c.id == cell_id)
    return "".join(out.get("text", "") for out in cell.outputs if out.output_type == "stream")


def _errors(notebook) -> list[str]:
    return [f"{cell.id}: {out.ename}: {out.evalue}" for cell in notebook.cells
            for out in cell.get("outputs", []) if out.output_type == "error"]


def _code_texts(folder: Path):
    """(where, source) of every .py file and every code cell of every notebook in `folder`."""
    for path in sorted(folder.rglob("*.py")):
        yield str(path), path.read_text(encoding="utf-8")
    for path in sorted(folder.rglob("*.ipynb")):
        for number, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "code":
                lines = "".join(cell["source"]).splitlines()
                yield f"{path} cell {number}", "\n".join(
                    line for line in lines if not line.lstrip().startswith(("%", "!")))


def _reference_source(name: str) -> str:
    return (REPO_ROOT / f"{HOME_MODULES[name].replace('.', '/')}.py").read_text(encoding="utf-8")


def _reference_definition(name: str) -> ast.FunctionDef:
    return next(node for node in ast.walk(ast.parse(_reference_source(name)))
                if isinstance(node, ast.FunctionDef) and node.name == name)


def _distinctive_lines(name: str) -> list[str]:
    """Lines of the reference's body (no docstring, comment or message text) long enough, and
    found in no other code of `course` (not `optimizer.zero_grad(...)`): a verbatim copy of any of
    them in the edition is a leak."""
    definition = _reference_definition(name)
    body = definition.body[1:] if isinstance(definition.body[0], ast.Expr) else definition.body
    own = _reference_source(name).splitlines()
    others = "\n".join(own[:definition.lineno - 1] + own[definition.end_lineno:] + [
        path.read_text(encoding="utf-8") for path in sorted((REPO_ROOT / "course").rglob("*.py"))
        if path != REPO_ROOT / f"{HOME_MODULES[name].replace('.', '/')}.py"])
    lines = (line.strip() for line in own[body[0].lineno - 1:definition.end_lineno])
    return [line for line in lines if len(line) >= 30 and line not in others
            and not line.startswith(("#", '"', "f\"", "raise "))]


@pytest.mark.slow
def test_no_unrevealed_reference_anywhere_in_the_edition(edition):
    prints = {name: set(value) for name, value in reference_prints().items()}
    for where, source in _code_texts(edition):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for name in UNREVEALED:
                    share = containment(prints[name], set(kgrams(tokens(node))))
                    assert share < FLAG_AT, f"{where}: {node.name} is the reference {name}"
    blobs = {path: path.read_bytes() for path in edition.rglob("*") if path.is_file()}  # never unpickled
    for name in UNREVEALED:
        lines = _distinctive_lines(name)
        assert len(lines) >= 1, name  # the scan has something to look for
        for path, data in blobs.items():
            for line in lines:
                assert line.encode() not in data, f"{path} holds a line of the reference {name}: {line}"
    revealed = [name for key in REVEALED for name in STAGE_NAMED[key].functions]
    for name in revealed:  # the scan finds what is there: the revealed references' own lines
        assert all(any(line.encode() in data for data in blobs.values()) for line in _distinctive_lines(name))
    assert not (edition / "solutions").exists() and not (edition / "tests").exists()
    assert not (edition / "instructor").exists()  # no instructor's code at all
    # the revealed stages' reference is there, whole; the others are stubs that say what to do
    for stage in REGISTRY:
        text = (edition / f"{stage.module.replace('.', '/')}.py").read_text(encoding="utf-8")
        original = (REPO_ROOT / f"{stage.module.replace('.', '/')}.py").read_text(encoding="utf-8")
        assert (text == original) == (stage.key in REVEALED), stage.key
    stubbed = subprocess.run(
        [sys.executable, "-c", "from course.off_policy import estimate_kl; estimate_kl(None, None)"],
        cwd=edition, env={**os.environ, "PYTHONPATH": str(edition)}, capture_output=True, text=True)
    assert "StageNotRevealed" in stubbed.stderr and "05_off_policy.ipynb" in stubbed.stderr
    assert "wait for the instructor to reveal it" in stubbed.stderr


@pytest.mark.slow
def test_the_copy_detector_ships_salted_hashes_and_still_catches_a_pasted_reference(edition):
    stored = json.loads((edition / "autograder" / "fixtures" / "fingerprints.json").read_text())
    unsalted = reference_prints()
    assert set(stored["functions"]) == set(unsalted)
    assert not any(value in json.dumps(stored) for values in unsalted.values() for value in values)
    pasted = ast.unparse(_reference_definition("estimate_kl")).replace("delta", "gap")
    caught = subprocess.run(
        [sys.executable, "-c", "import sys; from autograder.trusted.reference import copied_references; "
                               "print(sorted(copied_references([sys.stdin.read()], 'zero')))"],
        input=pasted, cwd=edition, env={**os.environ, "PYTHONPATH": str(edition)},
        capture_output=True, text=True, check=True)
    assert caught.stdout.strip() == "['estimate_kl']"


def _reference_as_one_file(path: Path) -> Path:
    """The whole reference as one .py submission (imports between graded modules dropped)."""
    parts = []
    for module in dict.fromkeys(m for stage in REGISTRY for m in (*stage.helper_modules, stage.module)):
        tree = ast.parse((REPO_ROOT / f"{module.replace('.', '/')}.py").read_text(encoding="utf-8"))
        tree.body = [node for node in tree.body if not (
            isinstance(node, ast.ImportFrom) and (node.module in STAGE_MODULES or node.module == "__future__"))]
        parts.append(ast.unparse(tree))
    path.write_text("from __future__ import annotations\n" + "\n\n".join(parts), encoding="utf-8")
    return path


def _own_environment() -> dict[str, str]:
    """This process's environment without PYTHONPATH: what runs in the edition finds its own code."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def _grade(python: Path, edition: Path, tmp_path: Path, *args: str) -> tuple[dict, str]:
    results = tmp_path / f"results{len(list(tmp_path.glob('results*')))}.json"
    run = subprocess.run([python, "-m", "pytest", "autograder", "-q", "-p", "no:cacheprovider",
                          "--results", str(results), *args], cwd=edition, capture_output=True, text=True,
                         timeout=900, env=_own_environment())
    assert results.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(results.read_text()), run.stdout


@pytest.mark.slow
def test_installed_edition_grades_from_stored_cases_blank_zero_reference_full(edition, installed, tmp_path):
    where = subprocess.run([installed, "-c", "import course, autograder; print(course.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True,
                           env=_own_environment()).stdout
    assert where.startswith(str(edition)), where  # pip install -e put the edition on the path

    blank, out = _grade(installed, edition, tmp_path)
    assert blank["score"] == 0 and blank["extra_data"]["practice"] is True
    assert PRACTICE in out and PRACTICE in blank["output"]
    assert all(t["status"] != "passed" for t in blank["tests"])

    with tempfile.TemporaryDirectory() as readable:  # the worker's own user reads a .py submission
        os.chmod(readable, 0o755)
        reference = _reference_as_one_file(Path(readable) / "reference.py")
        full, out = _grade(installed, edition, tmp_path, "--submission", str(reference), "--allow-reference")
    graded = [t for t in full["tests"] if t["status"] != "skipped"]
    skipped = {t["name"]: t["output"] for t in full["tests"] if t["status"] == "skipped"}
    assert [t["name"] for t in graded if t["status"] != "passed"] == [], out[-4000:]
    assert full["score"] == sum(t["max_score"] for t in graded) >= 60
    assert "get_response_log_probs: a bfloat16 model is scored in float32" in skipped
    assert all("official grade" in why or "cuda" in why for why in skipped.values()), skipped
    assert full["extra_data"]["practice"] is True and PRACTICE in out

    refused = subprocess.run([installed, "-m", "pytest", "autograder", "--official"], cwd=edition,
                             capture_output=True, text=True, env=_own_environment())
    assert refused.returncode == 4 and "stored cases only" in refused.stdout + refused.stderr


# imported at start-up where it lies on PYTHONPATH: the instructor's tools cannot be imported
NO_INSTRUCTOR_TOOLS = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("nbgrader", "latex2mathml", "instructor"):
            raise ImportError(f"the instructor's tool {name} was imported")
sys.meta_path.insert(0, Refuse())
"""


@pytest.mark.slow
def test_the_edition_installs_and_grades_without_the_instructors_tools(edition, installed, tmp_path):
    """Its pyproject names neither nbgrader nor latex2mathml, and a grading runs where importing
    them (or an `instructor` package) fails."""
    pyproject = (edition / "pyproject.toml").read_text(encoding="utf-8")
    assert "nbgrader" not in pyproject and "latex2mathml" not in pyproject
    (tmp_path / "refuse").mkdir()
    (tmp_path / "refuse" / "sitecustomize.py").write_text(NO_INSTRUCTOR_TOOLS, encoding="utf-8")
    environment = {**_own_environment(), "PYTHONPATH": str(tmp_path / "refuse")}
    probe = subprocess.run([installed, "-c", "import nbgrader"], env=environment,
                           capture_output=True, text=True)
    assert "the instructor's tool nbgrader was imported" in probe.stderr  # the refusal holds
    done = subprocess.run([installed, "-m", "pytest", "autograder", "-q", "-p", "no:cacheprovider",
                           "-k", "tokenize"], cwd=edition, env=environment, capture_output=True,
                          text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "instructor's tool" not in output, output[-3000:]
    assert "tokenize_prompt_and_output" in output and "PRACTICE" in output  # graded: blank, 0


@pytest.mark.slow
def test_solution_notebooks_grade_in_the_edition_as_in_the_repository(edition, installed, tmp_path):
    """The solution notebooks copied in: every check the edition can judge gives the verdict the
    full repository's stored-only grading gives (full marks where the solutions are complete)."""
    copy = tmp_path / "grpo"
    shutil.copytree(edition, copy, ignore=shutil.ignore_patterns("*.egg-info"))
    for notebook in (REPO_ROOT / "solutions").glob("*.ipynb"):
        shutil.copyfile(notebook, copy / "notebooks" / notebook.name)
    in_edition, _ = _grade(sys.executable, copy, tmp_path, "--allow-reference", "--seed", "1")
    in_repository, _ = _grade(sys.executable, REPO_ROOT, tmp_path, "--submission", str(copy / "notebooks"),
                              "--allow-reference", "--stored-only", "--seed", "1")
    verdicts = {t["name"]: (t["status"], t["score"]) for t in in_edition["tests"]}
    assert verdicts == {t["name"]: (t["status"], t["score"]) for t in in_repository["tests"]}
    assert in_edition["extra_data"]["practice"] is True and in_edition["score"] > 0


@pytest.mark.slow
def test_a_rebuild_never_overwrites_an_edited_notebook(edition, tmp_path, capsys):
    copy = tmp_path / "grpo"
    shutil.copytree(edition, copy)
    notebook = copy / "notebooks" / "03_advantages.ipynb"
    notebook.write_text(notebook.read_text() + " ", encoding="utf-8")  # a student's edit
    marker = (copy / "edition.json").read_bytes()
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    shutil.copyfile(REPO_ROOT / "solutions" / notebook.name, solutions / notebook.name)
    capsys.readouterr()
    code = release(["--student-edition", str(copy), "--reveal", "1,2,3", "--solutions", str(solutions)])
    message = capsys.readouterr().err
    assert code == 1 and notebook.name in message and "--force" in message
    assert "another --student-edition DIR" in message
    assert notebook.read_text().endswith(" ") and (copy / "edition.json").read_bytes() == marker
    assert (copy / "course" / "advantages.py").read_text() != \
        (REPO_ROOT / "course" / "advantages.py").read_text()  # stage 3 still not revealed: nothing written


@pytest.mark.parametrize("argv, flag", [
    (["--student-edition", "DIR", "--reveal", "9"], "--reveal"),
    (["--student-edition", "DIR", "--reveal", "x"], "--reveal"),
    (["--student-edition", "DIR", "--reveal", "1,,8"], "--reveal"),
    (["--reveal", "1"], "--reveal"),
    (["--reveal=all"], "--reveal"),
    (["--student-edition", "FILE"], "--student-edition"),
    (["--student-edition", "FULL"], "--student-edition"),
    (["--student-edition", "DIR", "--html", "out"], "--student-edition"),
])
def test_bad_flags_are_usage_errors_naming_the_flag(argv, flag, tmp_path, capsys):
    (tmp_path / "FILE").write_text("not a folder")
    (tmp_path / "FULL").mkdir()
    (tmp_path / "FULL" / "work.txt").write_text("someone's files")
    argv = [str(tmp_path / a) if a in ("DIR", "FILE", "FULL") else a for a in argv]
    with pytest.raises(SystemExit) as exited:
        release(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert flag in error and "Traceback" not in error
    assert (tmp_path / "FULL" / "work.txt").read_text() == "someone's files"
    assert not (tmp_path / "DIR").exists()


def test_reveal_reads_numbers_keys_all_and_none():
    from instructor.edition import parse_reveal

    assert parse_reveal("2,1") == REVEALED
    assert parse_reveal("1_tokenization, 2") == REVEALED
    assert parse_reveal("all") == tuple(STAGE_NAMED)
    assert parse_reveal("none") == parse_reveal("") == ()


@pytest.mark.slow
def test_stored_only_grading_still_catches_every_mutant_with_its_diagnosis():
    """The same checks on stored cases only (in-process, for speed: the judging is the same): each
    mutant of tests/test_autograder.py loses its check's points and is named, or its check is one
    a stored-only grading skips. The train step's mutants are graded once each (slow in-process):
    two, whose diagnoses need the stored per-row gradients."""
    import runpy

    from autograder.options import GradingOptions
    from autograder.selfcheck import InProcessRunner
    from autograder.trusted import checks  # noqa: F401  (registers the checks)
    from autograder.trusted.core import CHECKS
    from autograder.trusted.grader import Grader

    sys.path[:0] = [str(REPO_ROOT / "tests"), str(REPO_ROOT / "tests" / "autograder_cases")]
    try:
        from test_autograder import MUTANTS

        skipped = []
        for bug, (function, words, diagnosis) in MUTANTS.items():
            if function == "grpo_train_step" and bug not in ("per_microbatch_token_norm",
                                                             "zero_advantage_rows_skipped"):
                continue
            if bug == "plain_path_uses_chunked_head":
                continue  # the given head counts its calls in the sandbox's course sources only
            namespace = runpy.run_path(str(REPO_ROOT / "tests" / "autograder_cases" / f"mutant_{bug}.py"))
            grader = Grader(None, GradingOptions(stored_only=True, seed=5),
                            runner=InProcessRunner(namespace, 'cpu'))
            target = [grader.run_check(c) for c in CHECKS if c.function == function and words in c.name]
            assert target, bug
            for result in target:
                if result["status"] == "skipped":
                    assert "official grade" in result["output"], (bug, result["output"])
                    skipped.append(bug)
                else:
                    assert result["status"] == "failed" and diagnosis in result["output"], (bug, result)
        assert skipped == ["half_log_softmax", "masked_nan_gradient"]  # judged officially only
    finally:
        del sys.path[:2]


def test_a_stored_only_grading_never_reaches_the_reference():
    import torch

    from autograder.trusted.checks.common import reference_function, run_reference
    from autograder.trusted.core import STORED_ONLY, NeedsReference

    logits = {"logits": torch.zeros(1, 2)}
    token = STORED_ONLY.set(True)
    try:
        with pytest.raises(NeedsReference, match="official grade"):
            run_reference("compute_entropy", logits)
        with pytest.raises(NeedsReference):
            reference_function("tokenize_prompt_and_output")
    finally:
        STORED_ONLY.reset(token)
    assert run_reference("compute_entropy", logits).shape == (1,)  # the official grading computes it


LEARNERS_WORK = ("03_advantages.ipynb", "04_losses.ipynb", "05_off_policy.ipynb",
                 "06_aggregation.ipynb", "07_train_step.ipynb", "08_end_to_end.ipynb")


@pytest.mark.slow
def test_notebooks_07_and_08_run_on_the_learners_stages_where_not_revealed(edition, tmp_path,
                                                                          monkeypatch):
    """Stages 1-2 revealed, 01-02 blank, 03-08 the learner's finished work: notebook 07 binds the
    reference of stages 1-2 and the learner's stages 3-6, says so, and runs to the end (its
    self-check too); notebook 08 trains the learner's stages. On a run shorter than the recorded
    one (the learner changed the configuration; here, so that the test trains 2 steps, not 60) the
    reference of stages 3-7 is absent, so there is nothing to compare with and the notebook says
    why, never training a "reference" made of the learner's own stages. (The recorded run is the
    notebook's own configuration's: tests/test_implementations.py.)"""
    copy = _copy_edition(edition, tmp_path, *LEARNERS_WORK)
    assert (copy / "course" / "checkpoints" / "reference_run.json").read_bytes() == RECORDED.read_bytes()
    step = _execute(copy, "07_train_step.ipynb", tmp_path, monkeypatch)
    assert _errors(step) == []
    table = {line.split()[1]: line for line in _printed(step, "07_earlier").splitlines()}
    for stage in REGISTRY[:6]:
        for name in stage.functions:
            whose = "reference (course." if stage.key in REVEALED else f"yours ({stage.notebook})"
            assert whose in table[name], table
    assert re.search(r"grpo_train_step: (\d+)/\1 points", _printed(step, "07_train_step_check"))

    notebook = copy / "notebooks" / "08_end_to_end.ipynb"
    shorten_notebook_08(notebook)
    end_to_end = _execute(copy, "08_end_to_end.ipynb", tmp_path, monkeypatch)
    assert _errors(end_to_end) == []
    printed = _printed(end_to_end, "08_train")
    assert "yours (07_train_step.ipynb)" in printed and "reference (course.get_response_log_probs" in printed
    assert "yours: 2 steps on cpu" in printed
    assert "the recorded reference run is another run: steps=2 (recorded: 60)" in printed
    assert "reference: held-out" not in printed  # no live "reference" run on the learner's stand-ins


@pytest.mark.slow
def test_notebook_02_names_notebook_01_when_stage_1_is_neither_written_nor_revealed(tmp_path,
                                                                                   monkeypatch):
    folder = tmp_path / "bare"
    assert release(["--student-edition", str(folder), "--reveal", "none"]) == 0
    notebook = _execute(folder, "02_scoring.ipynb", tmp_path, monkeypatch, until="nb2_predict_reveal")
    assert _errors(notebook) == []  # a message, not a traceback
    message = _printed(notebook, "nb2_earlier")
    assert "finish 01_tokenization.ipynb" in message and "reveal stage 1_tokenization" in message
    assert "nats" in _printed(notebook, "nb2_predict_reveal")  # what needs no stage 1 still runs


@pytest.mark.slow
def test_course_train_in_an_edition_trains_with_its_notebooks(edition, tmp_path):
    copy = _copy_edition(edition, tmp_path)
    command = [sys.executable, "-m", "course.train", "--out", str(tmp_path / "run"), "--steps", "1",
               "--prompts-per-step", "2", "--group-size", "2", "--eval-problems", "2",
               "--eval-samples", "1", "--eval-every", "0"]
    env = {**os.environ, "PYTHONPATH": str(copy)}
    shutil.move(copy / "notebooks", tmp_path / "aside")
    refused = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "give --notebooks DIR" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "run").exists()
    shutil.move(tmp_path / "aside", copy / "notebooks")
    for name in LEARNERS_WORK[:5]:
        shutil.copyfile(REPO_ROOT / "solutions" / name, copy / "notebooks" / name)
    trained = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "has not revealed stage 3_advantages, 4_losses, 5_off_policy, 6_aggregation, 7_train_step" in trained.stdout
    origins = json.loads((tmp_path / "run" / "summary.json").read_text())["implementations"]
    assert origins["grpo_train_step"] == "yours (07_train_step.ipynb)"
    assert origins["estimate_kl"] == "yours (05_off_policy.ipynb)"
    assert origins["tokenize_prompt_and_output"].startswith("reference (course.")
