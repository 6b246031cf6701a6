"""The Gradescope bundle: what the zip holds, and grading in a simulated /autograder layout.

The slow test unpacks the zip into a temporary root laid out as Gradescope lays it out (source/,
submission/, results/) and runs `run_autograder` against this machine's Python (setup.sh's
installs are skipped: they are what made this environment), officially, in the sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.gradescope import build, find_submission, main
from autograder.trusted.isolation import sandbox_problem

ROOT = Path(__file__).resolve().parent.parent
TEST_KEYS = {"name", "score", "max_score", "status", "output", "visibility"}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    assert main(["--out", str(out)]) == 0
    return out


def test_zip_holds_the_grader_and_reference_and_nothing_for_students(bundle):
    with zipfile.ZipFile(bundle) as archive:
        infos = {info.filename: info for info in archive.infolist()}
    names = set(infos)
    for needed in ("run_autograder", "setup.sh", "requirements.txt", "autograder/conftest.py",
                   "autograder/test_checks.py", "autograder/fixtures/expected.pt",
                   "course/__init__.py", "course/train_step.py"):
        assert needed in names
    for name in names:
        top = name.split("/")[0]
        assert top not in ("tests", "solutions", "notebooks", ".git", ".venv"), name
        assert "__pycache__" not in name and not name.endswith((".pyc", ".ipynb")), name
    for script in ("run_autograder", "setup.sh"):
        assert (infos[script].external_attr >> 16) & 0o111, f"{script} is not executable"


def test_setup_sh_is_valid_bash_and_installs_what_grading_needs(bundle, tmp_path):
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(tmp_path)
    for script in ("setup.sh", "run_autograder"):
        subprocess.run(["bash", "-n", str(tmp_path / script)], check=True)
    setup = (tmp_path / "setup.sh").read_text()
    assert "apt-get install" in setup and "bubblewrap" in setup
    assert "download.pytorch.org/whl/cpu" in setup and '"torch' in setup
    assert "requirements.txt" in setup
    requirements = (tmp_path / "requirements.txt").read_text().split()
    for package in ("transformers", "tokenizers", "safetensors", "pytest", "nbformat"):
        assert any(r.startswith(package) for r in requirements), package
    assert not any(r.startswith(("nbgrader", "jupyter", "ruff", "torch")) for r in requirements)
    assert "GRADESCOPE_ROOT:-/autograder" in (tmp_path / "run_autograder").read_text()


def test_bad_flags_are_usage_errors_naming_the_flag(tmp_path, capsys):
    for argv, flag in ((["build"], "--out"), (["--out", str(tmp_path / "a.tar")], "--out"),
                       (["--out", str(tmp_path / "no" / "a.zip")], "--out")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert flag in capsys.readouterr().err
    existing = tmp_path / "a.zip"
    existing.write_bytes(b"the instructor's earlier bundle")
    with pytest.raises(SystemExit):
        main(["--out", str(existing)])
    assert "--force" in capsys.readouterr().err
    assert existing.read_bytes() == b"the instructor's earlier bundle"  # nothing lost


def test_the_upload_is_found_inside_one_folder(tmp_path):
    (tmp_path / "my_work").mkdir()
    (tmp_path / "my_work" / "01_tokenization.ipynb").write_text("{}")
    assert find_submission(tmp_path) == tmp_path / "my_work"
    (tmp_path / "02.ipynb").write_text("{}")
    assert find_submission(tmp_path) == tmp_path


def _layout(root: Path, bundle: Path, files: list[Path]) -> None:
    (root / "submission").mkdir(parents=True)
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    for file in files:
        shutil.copy(file, root / "submission" / file.name)


@pytest.mark.slow
@pytest.mark.skipif(bool(sandbox_problem(ROOT)), reason="an official grade needs bubblewrap")
def test_run_autograder_grades_officially_in_the_gradescope_layout(bundle, tmp_path):
    # the solution notebooks hold the reference itself: a student's bundle grades them as pasted
    # copies; the instructor's check bundle (--allow-reference) gives them full marks
    check_bundle = tmp_path / "check.zip"
    build(check_bundle, allow_reference=True)
    submissions = {
        "solutions": sorted((ROOT / "solutions").glob("*.ipynb")),
        "solutions_in_a_students_bundle": sorted((ROOT / "solutions").glob("*.ipynb")),
        "blank": sorted((ROOT / "notebooks").glob("*.ipynb")),
        # reads the stored expected values that lie next to the grader in source/
        "attack": [ROOT / "tests" / "redteam" / "snoop_fixtures.py"],
    }
    runs = {}
    for name, files in submissions.items():
        _layout(tmp_path / name, check_bundle if name == "solutions" else bundle, files)
        env = {**os.environ, "GRADESCOPE_ROOT": str(tmp_path / name),
               "GRADESCOPE_PYTHON": sys.executable}
        runs[name] = subprocess.Popen(["bash", str(tmp_path / name / "source" / "run_autograder")],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    results = {}
    for name, process in runs.items():
        output = process.communicate(timeout=900)[0].decode("utf-8", "replace")
        assert process.returncode == 0, output[-3000:]
        results[name] = json.loads((tmp_path / name / "results" / "results.json").read_text())
    maximum = sum(t["max_score"] for t in results["solutions"]["tests"])
    assert maximum > 0 and results["solutions"]["score"] == maximum, results["solutions"]
    assert results["blank"]["score"] == 0
    pasted = results["solutions_in_a_students_bundle"]
    assert pasted["score"] == 0 and "copy of the reference" in json.dumps(pasted["tests"])
    assert "--allow-reference" in results["solutions"]["output"]
    assert "--allow-reference" not in pasted["output"]
    assert results["attack"]["score"] == 0
    for document in results.values():
        assert "isolated" in document["output"] and not document.get("practice")
        assert "fresh-input seed" in document["output"]
        assert document["stdout_visibility"] == "hidden"
        for test in document["tests"]:
            assert set(test) <= TEST_KEYS
    # grading left the bundle as it was: nothing written into source/ but Python's caches
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
    for name in runs:
        if name == "solutions":
            continue  # graded from the check bundle
        written = {p.relative_to(tmp_path / name / "source").as_posix()
                   for p in (tmp_path / name / "source").rglob("*") if p.is_file()}
        assert {w for w in written - names if "__pycache__" not in w} == set()
