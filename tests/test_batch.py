"""Grading a class: rows, feedback, resuming after an interruption, --regrade, bad flags."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.batch import CSV_HEADER, entries, fingerprint, main, spreadsheet_safe
from autograder.trusted.isolation import sandbox_problem

ROOT = Path(__file__).resolve().parent.parent
REDTEAM = ROOT / "tests" / "redteam"
needs_sandbox = pytest.mark.skipif(bool(sandbox_problem(ROOT)), reason="official grades need bwrap")
FAST = ["--probe-timeout", "5", "--time-limit", "180", "--memory-mb", "3072"]


def _notebooks(folder: Path, source: Path) -> None:
    folder.mkdir()
    for notebook in source.glob("*.ipynb"):
        shutil.copy(notebook, folder / notebook.name)


def _batch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder.batch", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200)


def _rows(path: Path) -> dict[str, dict]:
    with path.open() as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def _stored(csv_path: Path) -> dict[str, int]:
    """{result file: its inode and modification time} (a rewrite changes them)."""
    store = csv_path.with_name(csv_path.name + ".results")
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in store.glob("*.json")}


@pytest.mark.slow
@needs_sandbox
def test_a_class_gets_one_right_row_per_student_and_a_rerun_grades_nothing_again(tmp_path):
    klass = tmp_path / "class"
    klass.mkdir()
    _notebooks(klass / "ada", ROOT / "solutions")
    _notebooks(klass / "blaise", ROOT / "notebooks")
    (klass / "carl").mkdir()  # a notebook that is not JSON
    (klass / "carl" / "01_tokenization.ipynb").write_text('{"cells": [ {"cell_type": "code", ')
    shutil.copy(REDTEAM / "classification_hang.py", klass / "dora.py")
    shutil.copy(REDTEAM / "delegation_wrapper.py", klass / "emmy.py")
    honest = (ROOT / "tests" / "autograder_cases" / "_impl.py").read_text()
    (klass / "felix.py").write_text(honest + "\n\nglobals().update(build())\n")
    grades = tmp_path / "grades.csv"
    done = _batch(str(klass), "--jobs", "2", "--csv", str(grades), *FAST)
    assert done.returncode == 0, done.stderr[-3000:]
    with grades.open() as handle:
        assert next(csv.reader(handle)) == CSV_HEADER
    rows = _rows(grades)
    assert sorted(rows) == ["ada", "blaise", "carl", "dora", "emmy", "felix"]
    maximum = float(rows["felix"]["max_score"])
    assert maximum > 0
    assert float(rows["felix"]["score"]) == maximum
    assert sum(float(rows["felix"][stage]) for stage in CSV_HEADER[3:]) == maximum
    # ada handed in the solution notebooks, which hold the reference: pasted copies earn nothing
    for student in ("ada", "blaise", "carl", "dora", "emmy"):
        assert float(rows[student]["score"]) == 0, student
        assert float(rows[student]["max_score"]) == maximum, student  # graded, not skipped
    feedback = {p.stem: p.read_text() for p in (tmp_path / "grades.csv.feedback").glob("*.txt")}
    assert sorted(feedback) == sorted(rows)
    assert "isolated" in feedback["felix"] and feedback["felix"].count("PASS") > 20
    assert "is a copy of the reference" in feedback["ada"]
    assert "timed out" in feedback["dora"]
    assert "only calls the reference" in feedback["emmy"]
    assert "01_tokenization.ipynb" in feedback["carl"]
    assert "NotImplementedError" in feedback["blaise"]
    before, text = _stored(grades), grades.read_text()
    again = _batch(str(klass), "--jobs", "2", "--csv", str(grades), *FAST)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "6 of 6 already graded" in again.stdout
    assert _stored(grades) == before and grades.read_text() == text


@pytest.mark.slow
@needs_sandbox
def test_an_interrupted_run_resumes_and_regrade_grades_again(tmp_path):
    klass = tmp_path / "class"
    klass.mkdir()
    for name in ("ann", "bob", "cat", "dan", "eve"):  # enough that Ctrl-C lands mid-class
        _notebooks(klass / name, ROOT / "notebooks")
    grades = tmp_path / "grades.csv"
    command = [sys.executable, "-m", "autograder.batch", str(klass), "--jobs", "1", "--csv",
               str(grades), *FAST]
    # a shell's background job ignores SIGINT and its children inherit that: restore Ctrl-C
    run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    while not _stored(grades) and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
    os.killpg(run.pid, signal.SIGINT)  # Ctrl-C: the whole process group
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130 and "run the same command again" in err, err[-2000:]
    first = _stored(grades)
    assert 1 <= len(first) < 5 and not grades.exists()
    resumed = _batch(*command[3:])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{len(first)} of 5 already graded" in resumed.stdout
    after = _stored(grades)
    assert sorted(after) == ["ann.json", "bob.json", "cat.json", "dan.json", "eve.json"]
    assert all(after[name] == first[name] for name in first)  # kept, not graded again
    assert sorted(_rows(grades)) == ["ann", "bob", "cat", "dan", "eve"]
    # a student who changed the submission is graded again; --regrade grades everyone again
    notebook = next((klass / "cat").glob("*.ipynb"))
    notebook.write_text(notebook.read_text().replace("NotImplementedError", "NotImplementedError "))
    changed = _batch(*command[3:])
    assert "4 of 5 already graded" in changed.stdout
    assert _stored(grades)["cat.json"] != after["cat.json"]
    before = _stored(grades)
    regraded = _batch(*command[3:], "--regrade")
    assert regraded.returncode == 0, regraded.stderr[-3000:]
    assert all(_stored(grades)[name] != before[name] for name in before)


@pytest.mark.parametrize("argv, flag", [
    (["{dir}", "--csv", "{tmp}/g.csv", "--jobs", "0"], "--jobs"),
    (["{dir}", "--csv", "{tmp}/g.csv", "--jobs", "two"], "--jobs"),
    (["{dir}", "--csv", "{tmp}/g.csv", "--probe-timeout", "-1"], "--probe-timeout"),
    (["{dir}"], "--csv"),
    (["{tmp}/nowhere", "--csv", "{tmp}/g.csv"], "DIR"),
    (["{dir}", "--csv", "{tmp}/no/g.csv"], "--csv"),
    (["{dir}", "--csv", "{tmp}/foreign.csv"], "--csv"),
    (["{dir}", "--csv", "{tmp}/g.csv", "--feedback", "{tmp}/foreign.csv"], "--feedback"),
    (["{tmp}/empty", "--csv", "{tmp}/g.csv"], "DIR"),
])
def test_bad_flags_are_usage_errors_naming_the_flag(tmp_path, capsys, argv, flag):
    (tmp_path / "class" / "ada").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "foreign.csv").write_text("name,grade\nada,A\n")
    argv = [a.format(dir=tmp_path / "class", tmp=tmp_path) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err
    assert (tmp_path / "foreign.csv").read_text() == "name,grade\nada,A\n"  # nothing lost


def test_entries_fingerprints_and_cells(tmp_path):
    (tmp_path / "ada").mkdir()
    (tmp_path / "ada" / "01.ipynb").write_text("{}")
    (tmp_path / "ada.py").write_text("x = 1\n")
    (tmp_path / "bob.ipynb").write_text("{}")
    (tmp_path / "notes.txt").write_text("not a submission")
    (tmp_path / ".hidden").mkdir()
    found = entries(tmp_path)
    assert found == {"ada": tmp_path / "ada", "ada.py": tmp_path / "ada.py",
                     "bob": tmp_path / "bob.ipynb"}
    before = fingerprint(tmp_path / "ada")
    (tmp_path / "ada" / "01.ipynb").write_text("{ }")
    assert fingerprint(tmp_path / "ada") != before
    assert spreadsheet_safe("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert spreadsheet_safe("ada") == "ada"
