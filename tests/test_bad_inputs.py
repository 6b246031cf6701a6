"""Bad inputs a user gives the commands: each is a one-line error naming the flag, or is handled,
and never a traceback. An output path is checked before any work: the course commands answer it
before torch is imported (`tests/test_cli.py`'s `run_main` reports whether it was)."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
from skip_notes import tier2_note
from test_cli import run_main

from autograder.trusted import checks  # noqa: F401  (registers the checks)
from autograder.trusted.core import CHECKS
from autograder.trusted.grader import READ_PROBLEMS
from autograder.trusted.isolation import sandbox_problem
from course.cli import unwritable
from course.loop.train_config import BOUNDS, MAX_SEED, MAX_THREADS, TrainConfig
from course.registry import STAGE_NAMED
from instructor import batch, gradescope, release

ROOT = Path(__file__).resolve().parent.parent
TINY_RUN = ["--prompts-per-step", "2", "--group-size", "2", "--eval-problems", "2",
            "--eval-samples", "1", "--eval-every", "0"]


@pytest.fixture
def read_only(tmp_path) -> Path:
    """A folder this user cannot write in: sysfs for root (whom permission bits do not stop)."""
    if os.geteuid() == 0:
        return Path("/sys")
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o555)
    return folder


def _one_line(stderr: str, start: str, *words: str) -> None:
    assert stderr.strip().splitlines()[0].startswith(start), stderr
    assert all(word in stderr for word in words) and "Traceback" not in stderr, stderr


# ---- output paths, checked before any work -----------------------------------------------------
def test_unwritable_says_what_stands_in_the_way(tmp_path, read_only):
    (tmp_path / "file").write_text("kept")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    assert unwritable(tmp_path / "new" / "deeper") is None  # made later, with its parents
    assert unwritable(tmp_path / "grades.csv", folder=False) is None
    assert unwritable(tmp_path / "file", folder=False) is None
    assert unwritable(tmp_path / "file") == f"{tmp_path / 'file'} is a file, not a folder"
    assert unwritable(tmp_path / "file" / "run") == f"{tmp_path / 'file'} is a file, not a folder"
    assert unwritable(tmp_path, folder=False) == f"{tmp_path} is a folder, not a file"
    assert unwritable(tmp_path / "dangling") == f"{tmp_path / 'dangling'} is a link to nothing"
    assert unwritable(tmp_path / "no" / "g.csv", folder=False) == f"no such folder {tmp_path / 'no'}"
    assert unwritable(read_only / "run").startswith(f"{read_only} is not writable (")
    assert (tmp_path / "file").read_text() == "kept" and sorted(p.name for p in tmp_path.iterdir()) \
        == ["dangling", "file"]  # nothing made, nothing left behind


@pytest.mark.parametrize("module", ["course.train", "course.lab.compare", "course.loop.warm_start",
                                    "course.lab.failure_runs", "course.lab.reference_run"])
@pytest.mark.parametrize("where", ["file", "read-only"])
def test_an_out_that_cannot_be_written_is_refused_before_torch_loads(module, where, read_only):
    if module == "course.lab.reference_run":  # its --out is a file: a folder is what it cannot write
        where = "folder" if where == "file" else where
        out = ROOT / "course" if where == "folder" else read_only / "run.json"
    else:
        out = ROOT / "README.md" if where == "file" else read_only / "run"
    result = run_main(module, "--out", str(out))
    expected = {"file": "is a file, not a folder", "folder": "is a folder, not a file"}
    _one_line(result.stderr, f"{module}: error: argument --out: ", expected.get(where, "is not writable"))
    assert result.stdout.strip() == "exit 2; torch loaded: False"


def test_an_out_holding_a_run_is_kept_unless_overwrite(tmp_path):
    (tmp_path / "summary.json").write_text('{"accuracy_after": 0.74}')
    result = run_main("course.train", "--out", str(tmp_path), "--steps", "1")
    _one_line(result.stderr, "course.train: error: argument --out: ", "holds a run already",
              "summary.json", "--overwrite")
    assert result.stdout.strip() == "exit 2; torch loaded: False"
    assert (tmp_path / "summary.json").read_text() == '{"accuracy_after": 0.74}'


@pytest.mark.parametrize("argv, flag", [
    (["--notebooks", "{file}"], "--notebooks"),
    (["--student-edition", "{read_only}/edition"], "--student-edition"),
    (["--html", "{file}"], "--html"),
])
def test_release_checks_the_folder_it_writes_first(argv, flag, read_only, capsys):
    argv = [a.format(file=ROOT / "README.md", read_only=read_only) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        release.main(argv)
    assert exit_info.value.code == 2
    _one_line(capsys.readouterr().err, f"instructor.release: error: argument {flag}: ")


def test_release_without_nbgrader_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "nbgrader", None)  # how Python marks a module as not there
    with pytest.raises(SystemExit) as exit_info:
        release.main(["--notebooks", str(tmp_path / "notebooks")])
    assert exit_info.value.code == 2
    _one_line(capsys.readouterr().err, "instructor.release: error: the release runs nbgrader, "
              "which is not installed: pip install -e \".[instructor]\"")


@pytest.mark.parametrize("flag", ["--csv", "--feedback"])
def test_batch_checks_its_csv_and_feedback_paths(tmp_path, read_only, capsys, flag):
    (tmp_path / "class" / "ada").mkdir(parents=True)
    argv = [str(tmp_path / "class"), "--csv", str(tmp_path / "g.csv")]
    argv += {"--csv": ["--csv", str(read_only / "g.csv")],
             "--feedback": ["--feedback", str(read_only / "feedback")]}[flag]
    with pytest.raises(SystemExit) as exit_info:
        batch.main(argv)
    assert exit_info.value.code == 2
    _one_line(capsys.readouterr().err, f"python -m instructor.batch: error: argument {flag}: ",
              "is not writable")


def test_gradescope_checks_its_out_zip(read_only, capsys):
    with pytest.raises(SystemExit) as exit_info:
        gradescope.main(["build", "--out", str(read_only / "grpo.zip")])
    assert exit_info.value.code == 2
    _one_line(capsys.readouterr().err, "python -m instructor.gradescope: error: argument --out: ",
              "is not writable")


# ---- numeric flags -------------------------------------------------------------------------------
def test_every_numeric_flag_has_a_bound_and_threads_and_seeds_an_upper_one():
    numeric = {f.name for f in fields(TrainConfig)
               if isinstance(f.default, (int, float)) and not isinstance(f.default, bool)}
    assert numeric == set(BOUNDS)
    too_high = [("--threads", "100000", MAX_THREADS),  # torch's thread pool: exit 139
                ("--seed", str(2**64), MAX_SEED)]  # torch.manual_seed: an overflow traceback
    for module in ("course.train", "course.lab.compare"):
        for flag, value, bound in too_high:
            flag = "--seeds" if module == "course.lab.compare" and flag == "--seed" else flag
            result = run_main(module, flag, value)
            _one_line(result.stderr, f"{module}: error: argument {flag}: ",
                      f"must be <= {bound}, got {value}")
            assert result.stdout.strip() == "exit 2; torch loaded: False"


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "argument --steps: must be >= 1, got 0"),  # no last step: nan entropy
    (["--seeds", "0", "1", "0"], "argument --seeds: 0 given twice"),
    (["--pg-methods", "grpo", "grpo"], "argument --pg-methods: grpo given twice"),
])
def test_compare_refuses_no_steps_and_repeated_runs(argv, message):
    result = run_main("course.lab.compare", *argv)
    _one_line(result.stderr, "course.lab.compare: error: ", message)
    assert result.stdout.strip() == "exit 2; torch loaded: False"


@pytest.mark.slow
def test_what_only_the_loaded_task_decides_is_a_usage_error_too(tmp_path):
    result = subprocess.run([sys.executable, "-m", "course.train", "--steps", "1", *TINY_RUN,
                             "--prompts-per-step", "100000"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2
    _one_line(result.stderr, "course.train: error: argument --prompts-per-step: (100000) must be at "
              "most the ")


# ---- Ctrl-C -------------------------------------------------------------------------------------
def _interrupt(module: str, argv: list[str], metrics: Path, steps: int, cwd: Path):
    """(stdout, stderr) of `python -m module argv` sent a real Ctrl-C (SIGINT) once `metrics`
    holds `steps` steps: amid the training steps."""
    run = subprocess.Popen([sys.executable, "-m", module, *argv], cwd=cwd, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while run.poll() is None and not (metrics.exists() and metrics.read_text().count("\n") >= steps):
            time.sleep(0.2)
        run.send_signal(signal.SIGINT)
        stdout, stderr = run.communicate(timeout=300)
    finally:
        run.kill()
    assert run.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    return stdout, stderr


@pytest.mark.slow
def test_ctrl_c_ends_with_the_steps_done_and_the_partial_file_named(tmp_path):
    out = tmp_path / "run"
    metrics = out / "metrics.jsonl"
    stdout, _ = _interrupt("course.train", ["--out", str(out), "--steps", "10000", *TINY_RUN],
                           metrics, 2, tmp_path)
    done = len(metrics.read_text().splitlines())
    assert done >= 2 and stdout.splitlines()[0].startswith(
        f"interrupted (Ctrl-C) after {done} of 10000 steps"), stdout
    assert f"partial: {metrics} holds the {done} steps done" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["metrics.jsonl"]


@pytest.mark.slow
def test_ctrl_c_in_compare_says_which_runs_are_whole(tmp_path):
    out = tmp_path / "compare"
    argv = ["--out", str(out), "--steps", "10000", *TINY_RUN, "--pg-methods", "grpo", "none",
            "--normalizations", "sequence"]
    _, stderr = _interrupt("course.lab.compare", argv, out / "grpo-sequence-seed0" / "metrics.jsonl",
                           1, tmp_path)
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted (Ctrl-C) after 0 of 2 runs: their folders in {out} are whole, the next "
        "one's partial; no compare.md, .json or .png")
    assert not (out / "compare.md").exists()


# ---- submissions ---------------------------------------------------------------------------------
def _pytest_autograder(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "autograder", "-p", "no:cacheprovider",
                           "-q", *argv], cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("name, size", [("huge.py", 193 * 2**20), ("huge.ipynb", 60 * 2**20)])
def test_a_huge_submission_is_one_line(tmp_path, name, size):
    with (tmp_path / name).open("wb") as handle:
        handle.truncate(size)  # sparse: no disk used
    result = _pytest_autograder("--submission", str(tmp_path / name))
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.strip() == (f"ERROR: --submission {tmp_path / name}: {size / 2**20:.1f} "
                                     f"MiB, over the grader's limit of {4 if name.endswith('py') else 50}"
                                     f" MiB for a {Path(name).suffix} file")


@pytest.mark.skipif(sandbox_problem(ROOT) is not None, reason="no bubblewrap sandbox here")
def test_one_notebook_is_graded_on_its_own_functions_and_says_what_it_skipped():
    stage = STAGE_NAMED["6_aggregation"]
    own = sum(check.function in stage.functions for check in CHECKS)
    result = _pytest_autograder("--submission", f"notebooks/{stage.notebook}")
    assert f"{own} failed, {len(CHECKS) - own} deselected" in result.stdout, result.stdout[-3000:]
    assert (f"{stage.notebook}: graded on the {own} checks of its own functions; the other "
            f"notebooks' {len(CHECKS) - own} checks were not run") in result.stdout
    assert "not defined in the submission" not in result.stdout


# ---- instructor.batch ----------------------------------------------------------------------------
def test_a_linked_student_folder_gets_a_row_that_says_why(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "class").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "class" / "mallory")
    assert batch.entries(tmp_path / "class") == {"mallory": tmp_path / "class" / "mallory"}
    with pytest.raises(batch.EntryProblem, match="a link"):
        batch.read_entry(tmp_path / "class" / "mallory")


def test_a_reading_problem_is_said_once_in_feedback_and_noted_in_the_csv():
    problem = "rand.ipynb: could not be read as a notebook: it is not UTF-8 text (byte 2)"
    failed = [{"name": f"f{i}: works", "stage": "1_tokenization", "score": 0.0, "max_score": 1.0,
               "status": "failed", "output": f"f{i} is not defined in the submission"
               f"{READ_PROBLEMS}{problem})"} for i in range(46)]
    record = {"student": "rand", "score": 0.0, "max_score": 46.0, "isolation": "", "seed": 1,
              "problems": [problem], "checks": failed}
    text = batch.feedback(record)
    assert text.count(problem) == 1 and text.count("(see the notes above)") == 46
    assert batch.short_note([problem]) == problem
    assert batch.short_note(list("abcde")) == "a; b; c; and 2 more in the feedback file"


@pytest.mark.slow
@pytest.mark.skipif(sandbox_problem(ROOT) is not None, reason="official grades need bwrap")
def test_a_class_of_unreadable_work_gets_a_note_on_every_row_and_jobs_are_clamped(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "rand.ipynb").write_bytes(bytes(range(256)) * 8)
    (folder / "trunc.ipynb").write_bytes((ROOT / "notebooks" / "06_aggregation.ipynb").read_bytes()[:5000])
    (folder / "syntax.py").write_text("def compute_entropy(logits):\n    return (\n")
    (tmp_path / "bob").mkdir()
    os.symlink(tmp_path / "bob", folder / "linked")
    grades = tmp_path / "g.csv"
    result = subprocess.run([sys.executable, "-m", "instructor.batch", str(folder), "--csv",
                             str(grades), "--jobs", "99", "--probe-timeout", "5", "--time-limit",
                             "300", "--memory-mb", "3072"], cwd=ROOT, capture_output=True,
                            text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    cores = len(os.sched_getaffinity(0))
    assert f"--jobs 99 is more than the {cores} cores this process may use" in result.stderr
    rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    words = {"rand": "not UTF-8", "trunc": "not JSON", "syntax": "SyntaxError", "linked": "link"}
    for student, word in words.items():
        assert word in rows[student]["note"], rows[student]
    feedback = (tmp_path / "g.csv.feedback" / "trunc.txt").read_text()
    assert feedback.count("not JSON") == 1, feedback


# ---- the test run itself -------------------------------------------------------------------------
def test_the_test_run_says_why_tier_2_skipped_and_what_runs_it():
    private = ("no landlock sandbox here: tier 2's stage users cannot run this Python "
               "(/home/someone/.pyenv/bin/python3: a folder above it is private)")
    lines = tier2_note([private] * 3 + ["needs a CUDA device"])
    assert lines[0] == f"3 tests of the sandbox's tier 2 were skipped: {private}"
    assert "/usr/bin/python3 -m venv .venv" in lines[1]
    assert tier2_note(["needs a CUDA device"]) == []
