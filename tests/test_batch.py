"""Grading a class: rows, feedback, resuming after an interruption, --regrade, bad flags."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.trusted.isolation import sandbox_problem
from course.registry import STAGES
from instructor.batch import (
    CSV_HEADER,
    EntryProblem,
    entries,
    main,
    read_entry,
    spreadsheet_safe,
    submission_digest,
)
from instructor.classmates import graded_prints, similar_pairs

ROOT = Path(__file__).resolve().parent.parent
REDTEAM = ROOT / "tests" / "redteam"
needs_sandbox = pytest.mark.skipif(bool(sandbox_problem(ROOT)), reason="official grades need bwrap")
FAST = ["--probe-timeout", "5", "--time-limit", "180", "--memory-mb", "3072"]


def _notebooks(folder: Path, source: Path) -> None:
    folder.mkdir()
    for notebook in source.glob("*.ipynb"):
        shutil.copy(notebook, folder / notebook.name)


def _batch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "instructor.batch", *args], cwd=ROOT,
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
    assert sum(float(rows["felix"][stage]) for stage in STAGES) == maximum
    # ada handed in the solution notebooks, which hold the reference: they earn their points, and
    # the instructor (not ada) sees them flagged, with the matched lines in the report
    assert float(rows["ada"]["score"]) == maximum
    assert "compute_entropy 100% (honest work at most 27%)" in rows["ada"]["similar_to_reference"]
    assert all(not rows[s]["similar_to_reference"] for s in rows if s != "ada")
    report = (tmp_path / "grades.csv.similar.txt").read_text()
    assert "ada:\n  compute_entropy: `compute_entropy` holds 100%" in report and " | " in report
    for student in ("blaise", "carl", "dora", "emmy"):
        assert float(rows[student]["score"]) == 0, student
        assert float(rows[student]["max_score"]) == maximum, student  # graded, not skipped
    feedback = {p.stem: p.read_text() for p in (tmp_path / "grades.csv.feedback").glob("*.txt")}
    assert sorted(feedback) == sorted(rows)
    assert "isolated" in feedback["felix"] and feedback["felix"].count("PASS") > 20
    assert "fingerprints" not in feedback["ada"] and "SIMILAR" not in feedback["ada"]
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
    for name in ("ann", "bob"):  # with one job, Ctrl-C after ann lands mid-class, in bob's
        _notebooks(klass / name, ROOT / "notebooks")
    grades = tmp_path / "grades.csv"
    command = [sys.executable, "-m", "instructor.batch", str(klass), "--jobs", "1", "--csv",
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
    assert len(first) == 1 and not grades.exists()
    resumed = _batch(*command[3:])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "1 of 2 already graded" in resumed.stdout
    after = _stored(grades)
    assert sorted(after) == ["ann.json", "bob.json"]
    assert all(after[name] == first[name] for name in first)  # kept, not graded again
    assert sorted(_rows(grades)) == ["ann", "bob"]
    # a student who changed the submission is graded again; --regrade grades everyone again
    notebook = next((klass / "bob").glob("*.ipynb"))
    notebook.write_text(notebook.read_text().replace("NotImplementedError", "NotImplementedError "))
    changed = _batch(*command[3:])
    assert "1 of 2 already graded" in changed.stdout
    assert _stored(grades)["bob.json"] != after["bob.json"]
    assert _stored(grades)["ann.json"] == after["ann.json"]
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
    (["{dir}", "--csv", "{tmp}/g.csv", "--copies", "all"], "--copies"),
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


def test_a_flag_of_similarity_to_the_reference_reaches_the_csv_and_the_report(tmp_path):
    """A record as a grading under --copies zero leaves it: the CSV names the function, its share
    and the honest maximum, and says zeroed; the report holds the matched lines."""
    from near_copies import near_copy_source

    from autograder.trusted.reference import authorship
    from instructor.batch import similarity_report, write_csv

    found = authorship([near_copy_source("estimate_kl", "all three")])[1]["estimate_kl"]
    record = {"student": "zed", "score": 0.0, "max_score": 3.0, "checks": [], "note": "",
              "similarity": {"estimate_kl": {"share": found.share, "honest_max": found.honest_max,
                                             "zeroed": True, "evidence": found.text()}}}
    similar, report = similarity_report([record])
    write_csv(tmp_path / "g.csv", [record], similar)
    assert _rows(tmp_path / "g.csv")["zed"]["similar_to_reference"] == \
        "estimate_kl 100% (honest work at most 23%, zeroed)"
    assert "zed:\n  estimate_kl: `estimate_kl` holds 100%" in report
    assert "zeroed (--copies zero)" in report and " | " in report


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
    before = submission_digest(tmp_path / "ada")
    (tmp_path / "ada" / "01.ipynb").write_text("{ }")
    assert submission_digest(tmp_path / "ada") != before
    assert spreadsheet_safe("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert spreadsheet_safe("ada") == "ada"
    for formula in (" =1+1", "+1", "-1", "@SUM(A1)", "\t=1"):
        assert spreadsheet_safe(formula) == "'" + formula


def _strange_entries(folder: Path) -> dict[str, str]:
    """Entries that cannot be graded, each with the words its note must hold."""
    (folder / "alice.py").write_text("x = 1\n")
    os.symlink("alice.py", folder / "mallory.py")  # alice's work under mallory's name
    (folder / "nina").mkdir()
    os.symlink("../alice.py", folder / "nina" / "solution.py")  # a link out of her own entry
    os.mkfifo(folder / "pipe.py")
    with (folder / "sparse.py").open("wb") as handle:
        handle.truncate(2**30)  # 1 GiB, no disk used: refused by its size, never copied
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "sock.ipynb"))
    (folder / "empty").mkdir()
    return {"mallory": "link", "nina": "link", "pipe": "pipe", "sparse": "over the limit",
            "sock": "socket", "empty": "no notebook"}


def test_an_entry_that_cannot_be_graded_is_read_as_nothing_and_says_why(tmp_path):
    strange = _strange_entries(tmp_path)
    found = entries(tmp_path)
    assert set(strange) | {"alice"} == set(found)
    for student, words in strange.items():
        with pytest.raises(EntryProblem, match=words):
            read_entry(found[student])
        assert len(submission_digest(found[student])) == 64  # never raises
    assert read_entry(found["alice"]) == ({"submission.py": b"x = 1\n"}, [])
    (tmp_path / "course").mkdir()  # a folder named like a package is a student's folder
    (tmp_path / "course" / "__init__.py").write_text("y = 2\n")
    assert read_entry(tmp_path / "course") == ({"submission.py": b"y = 2\n"}, [])


def test_similar_pairs_flag_near_identical_classmates_and_no_honest_pair(tmp_path):
    import ast

    from near_copies import disguised

    honest = {"ann": "_impl.py", "ben": "alt_loops.py", "cyd": "alt_functional.py",
              "dee": "alt_vectorized.py"}
    prints = {s: graded_prints(str(ROOT / "tests" / "autograder_cases" / f)) for s, f in honest.items()}
    tree = ast.parse((ROOT / "tests" / "autograder_cases" / "alt_vectorized.py").read_text())
    tree.body = [disguised(n) if isinstance(n, ast.FunctionDef) else n for n in tree.body]
    (tmp_path / "eli.py").write_text(ast.unparse(ast.fix_missing_locations(tree)))
    prints["eli"] = graded_prints(str(tmp_path / "eli.py"))
    pairs = similar_pairs(prints)
    assert [pair[:2] for pair in pairs] == [("dee", "eli")], pairs
    assert len(pairs[0][2]) >= 4 and min(pairs[0][2].values()) >= 0.85


@pytest.mark.slow
@needs_sandbox
def test_students_stay_apart_and_nothing_is_imported_from_where_batch_runs(tmp_path):
    """A class with every trick: a folder named `course`, a link to a classmate's work, a pipe, a
    sparse 1 GiB file, a formula for a name, two near-identical students; run from a folder that
    holds a hostile `course` package."""
    klass = tmp_path / "class"
    klass.mkdir()
    cases = ROOT / "tests" / "autograder_cases"
    honest = (cases / "_impl.py").read_text() + "\n\nglobals().update(build())\n"
    (klass / "alice.py").write_text(honest)
    strange = _strange_entries_beside(klass)
    _notebooks(klass / "course", ROOT / "notebooks")  # blank work, named like the reference
    shutil.copy(cases / "alt_vectorized.py", klass / "carol.py")
    import ast

    from near_copies import disguised

    tree = ast.parse((cases / "alt_vectorized.py").read_text())
    tree.body = [disguised(n) if isinstance(n, ast.FunctionDef) else n for n in tree.body]
    (klass / "dave.py").write_text(ast.unparse(ast.fix_missing_locations(tree)))
    shutil.copy(cases / "alt_loops.py", klass / "=HYPERLINK(1).py")
    hostile = tmp_path / "term"
    (hostile / "course").mkdir(parents=True)
    marker = tmp_path / "imported"
    (hostile / "course" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').write('the hostile course ran')\nraise SystemExit(3)\n")
    grades = tmp_path / "grades.csv"
    done = subprocess.run([sys.executable, "-m", "instructor.batch", str(klass), "--jobs", "2",
                           "--csv", str(grades), *FAST], cwd=hostile, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not marker.exists()
    rows = _rows(grades)
    maximum = float(rows["alice"]["max_score"])
    assert float(rows["alice"]["score"]) == maximum > 0
    assert float(rows["course"]["score"]) == 0 and float(rows["course"]["max_score"]) == maximum
    for student, words in strange.items():
        assert float(rows[student]["score"]) == 0 and words in rows[student]["note"], rows[student]
    assert "'=HYPERLINK(1)" in rows and float(rows["'=HYPERLINK(1)"]["score"]) > 0
    feedback = {p.stem: p.read_text() for p in (tmp_path / "grades.csv.feedback").glob("*.txt")}
    assert "PASS" not in feedback["mallory"] and "alice" not in feedback["mallory"]
    assert rows["carol"]["similar_to"].startswith("dave (") and rows["dave"]["similar_to"].startswith("carol (")
    assert all(not rows[s]["similar_to"] for s in rows if s not in ("carol", "dave"))
    report = (tmp_path / "grades.csv.similar.txt").read_text()
    assert "carol and dave: " in report and "not a penalty" in report


def _strange_entries_beside(klass: Path) -> dict[str, str]:
    """`_strange_entries` without its own alice.py (the class has a real one)."""
    scratch = klass / "_scratch"
    scratch.mkdir()
    strange = _strange_entries(scratch)
    for path in scratch.iterdir():
        if path.name != "alice.py":
            os.rename(path, klass / path.name)
    shutil.rmtree(scratch)
    return strange
