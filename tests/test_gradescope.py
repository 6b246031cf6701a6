"""The Gradescope bundle: what the zip holds, and grading in a simulated /autograder layout.

The slow test unpacks the zip into a temporary root laid out as Gradescope lays it out (source/,
submission/, results/) and runs `run_autograder` against this machine's Python (setup.sh's
installs are skipped: they are what made this environment), officially, in the sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from autograder.gradescope import find_submission
from autograder.gradescope import main as run_main
from autograder.trusted.isolation import sandbox_problem
from instructor.gradescope import build, main

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


NVIDIA = ['nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"', "filelock"]


@pytest.mark.parametrize("installed, requires, asked", [
    ("2.13.0+cpu", ["filelock"], "torch==2.13.0+cpu"),      # PyTorch's CPU index
    ("2.13.0", ["filelock"], "torch==2.13.0"),              # macOS, Windows: PyPI's CPU wheel
    ("2.14.1", NVIDIA, "torch==2.14.1+cpu"),                # PyPI's Linux wheel: a CUDA build
    ("2.14.1+cu130", ["filelock"], "torch==2.14.1+cpu"), ("2.14.1+rocm6.4", [], "torch==2.14.1+cpu")])
def test_the_rehearsal_image_gets_a_cpu_build_of_the_graders_torch(installed, requires, asked, monkeypatch,
                                                                   tmp_path):
    """setup.sh installs torch's CPU build on Gradescope; a GPU build's import alone outgrows 768 MB,
    so a rehearsal from a GPU build asks pip for its CPU twin, and says so where there is none."""
    from instructor import rehearsal

    monkeypatch.setattr(rehearsal.importlib.metadata, "version", lambda name: installed)
    monkeypatch.setattr(rehearsal.importlib.metadata, "requires", lambda name: requires)
    assert rehearsal.torch_requirement() == asked
    asked_pip = []

    def pip_fails(argv, **kwargs):
        asked_pip.append(argv)
        return subprocess.CompletedProcess(argv, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(rehearsal.subprocess, "run", pip_fails)
    monkeypatch.setattr(rehearsal, "WHEELS_CACHE", tmp_path)
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("requirements.txt", "numpy\n")
    with zipfile.ZipFile(archive) as bundle, pytest.raises(rehearsal.RehearsalError) as failure:
        rehearsal.download_wheels(bundle)
    assert asked in asked_pip[0] and "numpy" in asked_pip[0]
    gpu_build = asked != f"torch=={installed}"
    assert isinstance(failure.value, rehearsal.NoCpuTorch) == gpu_build
    assert ("CPU build" in str(failure.value)) == gpu_build


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
    # the solution notebooks hold the reference itself: a student's bundle grades them and flags
    # their similarity in a test hidden from students; the instructor's check bundle
    # (--allow-reference) gives them full marks without a flag
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
    (flag,) = [t for t in pasted["tests"] if t["visibility"] == "hidden"]
    assert pasted["score"] == maximum and "SIMILAR TO THE REFERENCE" in flag["name"]
    assert "holds 100% of the reference's fingerprints" in flag["output"]
    assert pasted["extra_data"]["similarity"] and not results["solutions"]["extra_data"]["similarity"]
    assert "--allow-reference" in results["solutions"]["output"]
    assert "--allow-reference" not in pasted["output"]
    assert results["attack"]["score"] == 0
    for document in results.values():
        assert "isolated" in document["output"] and document["extra_data"]["practice"] is False
        assert document["extra_data"]["isolation_tier"] == "bubblewrap" and "practice" not in document
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


# ---- a grading that did not complete is never a grade ------------------------------------------
def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _run_in_layout(root: Path, env: dict | None = None, *flags: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autograder.gradescope", "run", "--root", str(root),
                             *flags],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


@pytest.mark.slow
@pytest.mark.skipif(bool(sandbox_problem(ROOT)), reason="an official grade needs bubblewrap")
def test_a_grader_killed_mid_run_leaves_no_results_json_and_run_autograder_fails(tmp_path):
    """SIGKILL of the grading process (what the OOM killer does) once its sandbox is up: no
    results.json at all (Gradescope then shows an autograder error, not a grade) and `run` exits 1
    saying the grading did not complete. The killed grader had no chance to remove its own folder
    (mode 0700, in its TMPDIR, given here so that the test can remove it)."""
    root = tmp_path / "root"
    (root / "submission").mkdir(parents=True)
    # a submission whose entropy hangs (for the 30 s probe timeout): the grader is surely mid-run
    # when it is killed, however fast the machine grades the rest
    shutil.copy(ROOT / "tests" / "redteam" / "classification_hang.py", root / "submission")
    temporary = Path(tempfile.mkdtemp(prefix="killed-grader-"))  # outside tmp_path's 0700 parents
    os.chmod(temporary, 0o755)
    try:
        _kill_the_grader_mid_run(root, temporary)
        left = [p for p in temporary.iterdir()
                if not p.name.startswith("torchinductor_")]  # torch's own cache, kept by design
        assert all(p.name.startswith("autograder-") and p.stat().st_mode & 0o777 == 0o700
                   for p in left), left
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _kill_the_grader_mid_run(root: Path, temporary: Path) -> None:
    run = _run_in_layout(root, {"TMPDIR": str(temporary)})
    grader = None
    for _ in range(600):  # until the grader's sandbox is running, then a little more
        grader = next((pid for pid in _children(run.pid) if b"pytest" in _cmdline(pid)), None)
        if grader and _children(grader):
            break
        time.sleep(0.2)
    assert grader and _children(grader), "the grader never started its sandbox"
    time.sleep(3)
    os.kill(grader, signal.SIGKILL)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 1, err[-2000:]
    assert "GRADING DID NOT COMPLETE" in err and "no results.json" in err
    assert not (root / "results" / "results.json").exists()
    assert list((root / "results").iterdir()) == []  # nor half a file under another name


@pytest.mark.slow
def test_an_interrupted_grading_writes_no_results_json(tmp_path):
    """Ctrl-C (SIGINT) after the first checks were judged: pytest autograder writes nothing to
    --results while checks run, and an interrupted session is no grade (exit 3, says why)."""
    results = tmp_path / "results.json"
    grading = subprocess.Popen(
        [sys.executable, "-m", "pytest", "autograder", "-v", "-p", "no:cacheprovider", "--submission",
         str(ROOT / "tests" / "redteam" / "classification_hang.py"), "--results", str(results)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # each line as pytest writes it, not at exit
        # a shell's background job (CI's) ignores SIGINT, and a Python that inherits SIG_IGN never
        # installs its KeyboardInterrupt handler: give it the disposition a terminal's Ctrl-C meets
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    judged = ""
    while "tokenize_prompt_and_output" not in judged:  # a first stage's check is judged ...
        line = grading.stdout.readline()
        assert line, judged[-2000:]
        judged += line
    time.sleep(2)  # ... and compute_entropy hangs for its 30 s probe timeout
    assert not results.exists()  # nothing written midway
    grading.send_signal(signal.SIGINT)
    out, _ = grading.communicate(timeout=120)
    assert grading.returncode == 3, (judged + out)[-3000:]
    assert "GRADING DID NOT COMPLETE" in out and "interrupted" in out
    assert not results.exists()


def test_run_autograder_fails_where_isolation_is_refused(tmp_path):
    """Bubblewrap asked for where there is none (PATH without it; tier 2 would hold here, so it
    is asked for by name): the official grading refuses, no results.json is written, and `run`
    exits 1, so Gradescope reports an autograder error instead of recording 0."""
    root = tmp_path / "root"
    (root / "submission").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "autograder_cases" / "nothing_returns_zeros.py", root / "submission")
    run = _run_in_layout(root, {"PATH": str(tmp_path)}, "--isolation", "bubblewrap")
    out, err = run.communicate(timeout=300)
    assert run.returncode == 1, out[-2000:] + err[-2000:]
    assert "refusing to grade without isolation" in err and "GRADING DID NOT COMPLETE" in err
    assert not (root / "results" / "results.json").exists()


def test_a_grading_past_its_time_limit_writes_no_results_and_says_so(tmp_path):
    """--time-limit is wall time from the process's start: 2 s are spent before the first check
    (Python, pytest, torch), so no check runs; that is no grade: no results.json, exit 3."""
    results = tmp_path / "results.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "autograder", "-q", "-p", "no:cacheprovider",
                           "--submission", "course", "-k", "compute_entropy", "--results", str(results),
                           "--time-limit", "2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-2000:]
    assert "GRADING DID NOT COMPLETE" in done.stdout and "time limit of 2 s" in done.stdout
    assert not results.exists()


def test_a_batch_row_of_an_incomplete_grading_is_no_grade(tmp_path):
    from instructor.batch import feedback, write_csv

    record = {"student": "dana", "entry": "dana.py", "fingerprint": "", "seed": 7, "score": 12.0,
              "max_score": 66.0, "isolation": "", "checks": [], "problems": [],
              "incomplete": ["it ran past its time limit of 600 s"]}
    write_csv(tmp_path / "grades.csv", [record], {})
    header, row = (line.split(",") for line in (tmp_path / "grades.csv").read_text().splitlines())
    cells = dict(zip(header, row))
    assert row[:3] == ["dana", "incomplete", ""]  # no number at all
    assert {cells[stage] for stage in header[3:-3]} == {""}
    assert cells["note"] == "it ran past its time limit of 600 s" and cells["similar_to"] == ""
    assert cells["similar_to_reference"] == ""
    text = feedback(record)
    assert "GRADING DID NOT COMPLETE: this is not your score" in text and "12" not in text


# ---- options --------------------------------------------------------------------------------
BAD_VALUES = [
    (["--time-limit", "-5"], "--time-limit"), (["--time-limit", "nan"], "--time-limit"),
    (["--time-limit", "0"], "--time-limit"), (["--probe-timeout", "0"], "--probe-timeout"),
    (["--memory-mb", "-1"], "--memory-mb"), (["--seed", "x"], "--seed"),
]


@pytest.mark.parametrize("argv,flag", BAD_VALUES + [(["--device", "cuda"], "--device cuda")])
def test_bad_grader_options_are_usage_errors_naming_the_flag(argv, flag):
    if flag == "--device cuda":
        import torch

        if torch.cuda.is_available():
            pytest.skip("CUDA is available here")
    done = subprocess.run([sys.executable, "-m", "pytest", "autograder", "-q", "-p", "no:cacheprovider",
                           "--submission", "course", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert flag in done.stderr and "Traceback" not in done.stderr + done.stdout
    assert "collected" not in done.stdout  # refused before grading anything


@pytest.mark.parametrize("module,argv", [
    ("autograder.gradescope", ["run", "--time-limit", "nan"]),
    ("instructor.gradescope", ["rehearse", "--cpus", "-1"]),
    ("instructor.batch", [".", "--csv", "g.csv", "--time-limit", "inf"]),
    ("instructor.batch", [".", "--csv", "g.csv", "--memory-mb", "-1"]),
    ("instructor.batch", [".", "--csv", "g.csv", "--jobs", "0"]),
])
def test_cli_usage_errors_are_one_line_before_torch(module, argv, tmp_path):
    script = ("import runpy, sys\n"
              f"sys.argv = [{module!r}, *{argv!r}]\n"
              "try:\n"
              f"    runpy.run_module({module!r}, run_name='__main__')\n"
              "except SystemExit as exc:\n"
              "    print('exit', exc.code, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.split() == ["exit", "2", "False"], done.stdout + done.stderr
    flag = [a for a in argv if a.startswith("--")][-1]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and flag in lines[0] and "--help" in lines[1], done.stderr


def test_run_refuses_a_root_without_a_submission_folder(tmp_path, capsys):
    typo = tmp_path / "typo"
    with pytest.raises(SystemExit) as exit_info:
        run_main(["run", "--root", str(typo)])
    assert exit_info.value.code == 2 and "--root" in capsys.readouterr().err
    assert not typo.exists()  # nothing created at a mistyped root


def test_the_check_bundle_says_it_is_not_for_students(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "check.zip"), "--allow-reference"]) == 0
    said = capsys.readouterr().out
    assert "NOT FOR GRADING STUDENTS" in said and "upload it as the assignment's autograder" not in said
    with zipfile.ZipFile(tmp_path / "check.zip") as archive:
        assert "--allow-reference" in archive.read("run_autograder").decode()


def test_a_bundle_built_with_copies_zero_grades_with_it(tmp_path):
    assert main(["--out", str(tmp_path / "strict.zip"), "--copies", "zero"]) == 0
    assert main(["--out", str(tmp_path / "default.zip")]) == 0
    with zipfile.ZipFile(tmp_path / "strict.zip") as strict, \
            zipfile.ZipFile(tmp_path / "default.zip") as default:
        assert "--copies zero" in strict.read("run_autograder").decode()
        assert "--copies" not in default.read("run_autograder").decode()


# ---- reading the submission ---------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(bool(sandbox_problem(ROOT)), reason="an official grade needs bubblewrap")
def test_a_py_in_a_folder_only_its_owner_may_enter_is_graded(tmp_path):
    """The stage children run under user ids of their own; the upload's folder is 0700. The
    trusted side hands them a private copy (with the helper module beside it)."""
    from autograder.api import grade

    folder = tmp_path / "upload"
    folder.mkdir(mode=0o700)
    for name in ("alt_full.py", "_impl.py"):
        shutil.copy(ROOT / "tests" / "autograder_cases" / name, folder / name)
    os.chmod(folder, 0o700)
    graded = grade(str(folder / "alt_full.py"), ("compute_entropy",), official=True)
    assert graded["score"] == graded["max_score"] > 0, graded["results"]


def test_a_notebook_of_nested_empty_lists_is_refused_in_bounded_memory(tmp_path):
    """48 MiB of `[],` would build 16 million lists (1.5 GB): counted first, refused, and the
    reader's memory grows by far less than the file would build."""
    notebook = tmp_path / "lists.ipynb"
    notebook.write_bytes(b'{"cells": [' + b"[]," * (16 * 2**20) + b'[]]}')
    script = ("import resource, sys\n"
              "from pathlib import Path\n"
              "from course.submissions.reader import load_submission\n"
              "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              f"loaded = load_submission({str(notebook)!r}, Path('.'))\n"
              "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "print((after - before) // 1024); print(loaded.problems)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    grown, problems = done.stdout.splitlines()[:2]
    assert "over the limit of 1,000,000" in problems, done.stdout + done.stderr
    assert int(grown) < 300, f"the reader grew by {grown} MiB"  # the file alone is 48 MiB


def test_json_values_bounds_what_the_parser_builds():
    from course.submissions.reader import JSON_STRING, json_values

    text = json.dumps({"cells": [{"source": ["a, [b]", "{c}"]}, [], [1, 2]]}).encode()
    # outside strings 4 commas, 4 "[" and 2 "{" (10); inside them 1, 1 and 1 more. Under the
    # limit the cheap count of all of them (13) is the bound; above it, strings are left out
    assert json_values(text) == 13
    assert JSON_STRING.sub(b"", text) == b'{: [{: [, ]}, [], [1, 2]]}'
    many = b"[" + b'"x,[{",' * 600_000 + b"1]"  # 2.4 million by the cheap count
    assert json_values(many) == 600_000 + 1
