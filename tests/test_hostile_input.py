"""Hostile input on the trusted side: malformed notebooks, links planted where results.json goes,
and terminal control codes in anything a submission can make the grader print or write."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.trusted.report import check_table, escape
from autograder.trusted.results import ResultsError, write_results
from course.submissions import reader as reading
from course.submissions.reader import load_submission

ROOT = Path(__file__).resolve().parent.parent
ENTROPY = """import torch


def compute_entropy(logits):
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    shifted = z - z.max(dim=-1, keepdim=True).values
    weights = shifted.exp()
    partition = weights.sum(-1)
    return partition.log() - (weights * shifted).sum(-1) / partition
"""
CONTROL = "\x1b[2J\x1b]0;owned\x07\r\u202e\u2066\x00\x9b"  # clear, title, CR, bidi, NUL, CSI


def _code(source) -> dict:
    return {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": source}


def _notebook(path: Path, cells: list) -> Path:
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def _with_good_notebook(folder: Path) -> Path:
    _notebook(folder / "z_good.ipynb", [_code(ENTROPY)])
    return folder


def _read(folder: Path):
    submission = load_submission(str(folder), ROOT)
    return submission, " | ".join(submission.problems)


# ---- malformed notebooks -----------------------------------------------------------------------
UNREADABLE = {  # name -> (bytes of the notebook, words of the diagnosis)
    "list_at_top": (b"[1, 2, 3]", "its JSON is a list"),
    "number_at_top": (b"42", "its JSON is a number"),
    "cells_not_a_list": (b'{"cells": {"0": "def compute_entropy(x): pass"}}', "no list of cells"),
    "no_cells": (b'{"metadata": {}}', "no list of cells"),
    "not_json": (b"def compute_entropy(x): pass", "not JSON"),
    "not_utf8": (b'{"cells": [{"cell_type": "code", "source": "# \xff\xfe\xc0"}]}', "not UTF-8"),
    "deep_json": (b"[" * 200_000, "nested too deeply"),
    "huge_json_number": (b'{"cells": [], "n": ' + b"9" * 100_000 + b"}", "not JSON"),
    "empty_file": (b"", "not JSON"),
}


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_an_unreadable_notebook_costs_only_its_own_definitions(tmp_path, name):
    data, words = UNREADABLE[name]
    (tmp_path / f"{name}.ipynb").write_bytes(data)
    submission, problems = _read(_with_good_notebook(tmp_path))
    assert submission.providers == {"compute_entropy": 0}
    assert f"{name}.ipynb: could not be read as a notebook" in problems and words in problems


MALFORMED_CELLS = {  # name -> (cell, words of the diagnosis)
    "cell_a_number": (7, "the cell is a number"),
    "cell_null": (None, "the cell is null"),
    "source_a_number": (_code(12), "its source is a number"),
    "source_a_dict": (_code({"text": "def estimate_kl(): pass"}), "its source is an object"),
    "source_lines_not_text": (_code(["def estimate_kl():\n", 3]), "a list of more than text"),
    "deep_unary": (_code("XX = " + "-" * 100_000 + "1"), "too complex to read"),
    "deep_binary": (_code("def f():\n    return " + "1+" * 100_000 + "1"), "too complex to read"),
    "deep_calls": (_code("XX = f" + "()" * 100_000), "too complex to read"),
    "deep_lambdas": (_code("XX = " + "lambda: " * 30_000 + "1"), "too complex to read"),
    "deep_attributes": (_code("XX = a" + ".b" * 100_000), "too complex to read"),
    "deep_parentheses": (_code("XX = " + "(" * 100_000 + ")" * 100_000), "SyntaxError"),
    "unparse_too_deep": (_code("def f():\n    return " + "1+" * 600 + "1"), "too complex to read"),
    "huge_integer_literal": (_code("XX = " + "9" * 100_000), "SyntaxError"),
    "null_byte": (_code("def estimate_kl():\x00 pass"), "SyntaxError"),
    "huge_cell": (_code("# " + "x" * reading.MAX_CELL_CHARS), "over the limit"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_CELLS))
def test_a_malformed_cell_costs_only_its_own_definitions(tmp_path, name):
    cell, words = MALFORMED_CELLS[name]
    _notebook(tmp_path / "a.ipynb", [{"cell_type": "markdown", "source": "intro"}, cell,
                                     _code(ENTROPY)])
    submission, problems = _read(tmp_path)
    assert submission.providers == {"compute_entropy": 0}, problems
    assert "a.ipynb" in problems and words in problems and "not graded" in problems


def test_cells_without_a_code_type_are_not_graded_and_garbage_metadata_is_ignored(tmp_path):
    cells = [{"source": "def estimate_kl(): pass"}, {"cell_type": 3, "source": "x"},
             {**_code(ENTROPY), "metadata": "garbage", "outputs": 5}]
    _notebook(tmp_path / "a.ipynb", cells)
    assert _read(tmp_path)[0].providers == {"compute_entropy": 0}


def test_a_100_mb_notebook_is_refused_unread(tmp_path):
    _notebook(tmp_path / "big.ipynb", [_code("# " + "x" * 100 * 2**20)])
    submission, problems = _read(_with_good_notebook(tmp_path))
    assert submission.providers == {"compute_entropy": 0} and "over the limit of 50 MB" in problems


def test_a_notebook_of_100_000_cells_is_read_up_to_the_cap(tmp_path):
    _notebook(tmp_path / "many.ipynb", [_code("x = 1")] * 100_000 + [_code(ENTROPY)])
    submission, problems = _read(tmp_path)
    assert f"only the first {reading.MAX_CELLS:,} of its 100,001 cells" in problems
    assert "compute_entropy" not in submission.providers  # it sat past the cap


def test_the_characters_parsed_are_bounded_across_notebooks(tmp_path):
    cell = _code("# " + "x" * (reading.MAX_CELL_CHARS - 10))
    count = reading.MAX_SOURCE_CHARS // reading.MAX_CELL_CHARS + 2
    for number in range(count):
        _notebook(tmp_path / f"{number:02d}.ipynb", [cell])
    _notebook(tmp_path / "zz.ipynb", [_code(ENTROPY)])
    submission, problems = _read(tmp_path)
    assert "not read: the submission's code cells before it hold" in problems
    assert "compute_entropy" not in submission.providers


def test_links_and_pipes_in_a_submission_folder_are_not_read(tmp_path):
    secret = tmp_path.parent / f"{tmp_path.name}-secret.ipynb"
    _notebook(secret, [_code("def estimate_kl(): pass")])
    (tmp_path / "link.ipynb").symlink_to(secret)
    os.mkfifo(tmp_path / "pipe.ipynb")  # opening it for reading would block a naive reader
    submission, problems = _read(_with_good_notebook(tmp_path))
    assert submission.providers == {"compute_entropy": 0}
    assert "link.ipynb: could not be read as a notebook: it is a link" in problems
    assert "pipe.ipynb: could not be read as a notebook: it is not a regular file" in problems


# ---- results.json ------------------------------------------------------------------------------
DOCUMENT = {"score": 1.0, "tests": [{"name": "a", "score": 1.0, "output": "ok"}]}


def _victim(folder: Path) -> Path:
    victim = folder / "victim.txt"
    victim.write_text("precious")
    return victim


def _plant_links(folder: Path, victim: Path) -> None:
    """Links at results.json and at every temporary name a predictable writer would use."""
    (folder / "results.json").symlink_to(victim)
    for pid in range(max(os.getpid() - 50, 1), os.getpid() + 50):
        (folder / f".results.json.{pid}.tmp").symlink_to(victim)


def test_results_json_replaces_planted_links_instead_of_writing_through_them(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = _victim(outside)
    shared = tmp_path / "shared"
    shared.mkdir()
    _plant_links(shared, victim)
    write_results(DOCUMENT, shared / "results.json")
    assert victim.read_text() == "precious"
    target = shared / "results.json"
    assert not target.is_symlink() and json.loads(target.read_text()) == DOCUMENT
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    leftovers = [p.name for p in shared.iterdir() if not p.name.startswith(".results.json.")]
    assert leftovers == ["results.json"]  # the private folder is gone


@pytest.mark.skipif(os.geteuid() != 0, reason="planting as another user needs root")
def test_in_a_sticky_shared_folder_a_link_planted_by_another_user_is_never_followed():
    """/tmp-like folder (mode 1777): as root the link is replaced; as a user who may not replace
    it (sticky bit), writing fails with a message naming the path, and the link's target, which
    that user could write, is untouched."""
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:  # pytest's own is not reachable
        _sticky_folder_case(Path(folder))


def _sticky_folder_case(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    home = tmp_path / "home"
    home.mkdir()
    victim = _victim(home)
    writer, planter = 65533, 65534
    os.chown(home, writer, writer)
    os.chown(victim, writer, writer)
    _plant_links(sticky, victim)
    for link in sticky.iterdir():
        os.lchown(link, planter, planter)

    pid = os.fork()
    if pid == 0:  # the grader running as an ordinary user
        code = 3
        try:
            os.setgid(writer)
            os.setuid(writer)
            write_results(DOCUMENT, sticky / "results.json")
            code = 1
        except ResultsError as exc:
            words = (str(sticky / "results.json"), "choose another --results path")
            code = 0 if all(w in str(exc) for w in words) else 2
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    assert victim.read_text() == "precious" and (sticky / "results.json").is_symlink()
    assert not [p for p in sticky.iterdir() if not p.is_symlink()]  # no private folder left

    write_results(DOCUMENT, sticky / "results.json")  # the grader running as root
    assert victim.read_text() == "precious"
    assert json.loads((sticky / "results.json").read_text()) == DOCUMENT


def test_results_json_strings_are_escaped_and_capped(tmp_path):
    document = {"output": f"note{CONTROL}", "tests": [{"name": "x", "output": "y" * 50_000}]}
    write_results(document, tmp_path / "results.json")
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["output"] == escape(f"note{CONTROL}") and not _has_control(written["output"])
    assert len(written["tests"][0]["output"]) < 21_000


# ---- escaping ----------------------------------------------------------------------------------
def _has_control(text: str) -> bool:
    return any(not (c.isprintable() or c == "\n") for c in text)


def test_escape_writes_control_codes_out_and_keeps_newlines():
    assert escape(f"a{CONTROL}b\nc") == (r"a\x1b[2J\x1b]0;owned\x07\r\u202e\u2066\x00\x9bb" "\nc")
    assert escape("plain text, é ∑ 🙂") == "plain text, é ∑ 🙂"
    assert escape("\ud800") == r"\ud800"


def test_the_score_table_shows_no_control_codes():
    result = {"name": "compute_entropy: values match", "status": "failed", "score": 0.0,
              "max_score": 2.0, "output": f"raised ValueError: {CONTROL}\r\nFULL MARKS{CONTROL}"}
    lines = check_table([result])
    assert not any(_has_control(line) for line in lines)
    assert any(r"\x1b[2J" in line for line in lines)


# ---- a whole grading ---------------------------------------------------------------------------
@pytest.mark.slow
def test_a_grading_with_malformed_notebooks_writes_results_and_grades_the_rest(tmp_path):
    submission = tmp_path / "submission"
    submission.mkdir()
    for name, (data, _) in UNREADABLE.items():
        (submission / f"{name}.ipynb").write_bytes(data)
    cells = [cell for cell, _ in MALFORMED_CELLS.values()]
    _notebook(submission / f"cells{CONTROL.replace(chr(0), '')}.ipynb", cells)
    _notebook(submission / "z_good.ipynb", [_code(ENTROPY), _code(
        f"def compute_group_normalized_rewards(*args, **kwargs):\n"
        f"    raise ValueError({CONTROL!r} * 3)\n")])
    results = tmp_path / "results.json"
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "autograder", "--submission", str(submission),
         "--results", str(results), "-p", "no:cacheprovider", "-q",
         "-k", "compute_entropy or compute_group_normalized_rewards"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 1, completed.stdout[-3000:]
    document = json.loads(results.read_text())
    scores = {}
    for test in document["tests"]:
        function = test["name"].split(":")[0]
        scores[function] = scores.get(function, 0) + test["score"]
        assert not _has_control(test["output"])
    assert scores["compute_entropy"] == 4 and scores["compute_group_normalized_rewards"] == 0
    assert r"cells\x1b[2J\x1b]0;owned\x07\r\u202e\u2066\x9b.ipynb, cell 1" in document["output"]
    assert "more problems with the submission" in document["output"]
    assert "note: list_at_top.ipynb: could not be read as a notebook" in completed.stdout
    assert not _has_control(document["output"]) and not _has_control(completed.stdout)
    assert r"raised ValueError: \x1b[2J" in completed.stdout


@pytest.mark.slow
def test_a_results_path_that_cannot_be_written_safely_is_reported_not_a_traceback(tmp_path):
    (tmp_path / "results.json").mkdir()  # rename cannot replace a folder
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "autograder", "--submission", "course", "-q",
         "--results", str(tmp_path / "results.json"), "-p", "no:cacheprovider",
         "-k", "compute_entropy and values"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 1 and "Traceback" not in completed.stdout + completed.stderr
    assert f"RESULTS NOT WRITTEN: cannot write {tmp_path / 'results.json'}" in completed.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no private folder left
