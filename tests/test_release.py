"""Nothing a student wrote is lost: a release never overwrites a notebook edited since the last one."""

from __future__ import annotations

import pytest

from instructor.manifest import MANIFEST, EditedNotebooks, edited_notebooks, write_notebooks


def test_a_release_records_what_it_wrote_and_rewrites_untouched_notebooks(tmp_path):
    write_notebooks(tmp_path, {"01.ipynb": b"release 1", "02.ipynb": b"release 1"})
    assert (tmp_path / MANIFEST).is_file()
    write_notebooks(tmp_path, {"01.ipynb": b"release 2", "02.ipynb": b"release 2"})
    assert (tmp_path / "01.ipynb").read_bytes() == b"release 2"


def test_an_edited_notebook_is_not_overwritten_and_the_message_says_how_to_proceed(tmp_path):
    write_notebooks(tmp_path, {"01.ipynb": b"release 1", "02.ipynb": b"release 1"})
    (tmp_path / "02.ipynb").write_bytes(b"a student's answer")
    with pytest.raises(EditedNotebooks) as refused:
        write_notebooks(tmp_path, {"01.ipynb": b"release 2", "02.ipynb": b"release 2"},
                        elsewhere="--notebooks DIR")
    message = str(refused.value)
    assert "02.ipynb" in message and "01.ipynb" not in message
    assert "--force" in message and "--notebooks DIR" in message
    # nothing at all was written: not even the untouched notebook
    assert (tmp_path / "01.ipynb").read_bytes() == b"release 1"
    assert (tmp_path / "02.ipynb").read_bytes() == b"a student's answer"
    write_notebooks(tmp_path, {"01.ipynb": b"release 2", "02.ipynb": b"release 2"}, force=True)
    assert (tmp_path / "02.ipynb").read_bytes() == b"release 2"


def test_deleting_an_edited_notebook_is_refused_too(tmp_path):
    write_notebooks(tmp_path, {"01.ipynb": b"release 1", "old.ipynb": b"release 1"})
    (tmp_path / "old.ipynb").write_bytes(b"edited")
    assert edited_notebooks(tmp_path, {"01.ipynb": b"release 2"}, removed=["old.ipynb"]) == \
        ["old.ipynb"]
    with pytest.raises(EditedNotebooks):
        write_notebooks(tmp_path, {"01.ipynb": b"release 2"}, removed=["old.ipynb"])
    assert (tmp_path / "old.ipynb").exists()


def test_without_a_manifest_only_notebooks_that_would_not_change_are_safe(tmp_path):
    (tmp_path / "01.ipynb").write_bytes(b"same")
    (tmp_path / "02.ipynb").write_bytes(b"someone's work")
    assert edited_notebooks(tmp_path, {"01.ipynb": b"same", "02.ipynb": b"release",
                                       "03.ipynb": b"new"}) == ["02.ipynb"]
    (tmp_path / MANIFEST).write_text("not json")  # a damaged manifest protects like none
    assert edited_notebooks(tmp_path, {"02.ipynb": b"release"}) == ["02.ipynb"]


@pytest.mark.slow
def test_course_release_keeps_a_students_answers(tmp_path, capsys):
    """The real command, on one notebook: an edited release notebook stops the release."""
    import shutil

    from course.paths import ROOT as REPO_ROOT
    from instructor.release import main as release

    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    solutions.mkdir()
    shutil.copy(REPO_ROOT / "solutions" / "01_tokenization.ipynb", solutions)
    flags = ["--solutions", str(solutions), "--notebooks", str(notebooks)]
    assert release(flags) == 0
    released = (notebooks / "01_tokenization.ipynb").read_bytes()
    assert release(flags) == 0  # an untouched release is rewritten without asking
    answer = released.replace(b"raise NotImplementedError()", b"return 42", 1)
    (notebooks / "01_tokenization.ipynb").write_bytes(answer)
    capsys.readouterr()
    assert release(flags) == 1
    error = capsys.readouterr().err
    assert "01_tokenization.ipynb" in error and "--force" in error and "--notebooks DIR" in error
    assert (notebooks / "01_tokenization.ipynb").read_bytes() == answer  # nothing lost
    assert release([*flags, "--force"]) == 0
    assert (notebooks / "01_tokenization.ipynb").read_bytes() == released


def test_nbgrader_finds_its_commands_beside_this_interpreter(tmp_path, monkeypatch):
    """`.venv/bin/python -m instructor.release` without an activated virtualenv: nbgrader's database
    step runs `alembic` from PATH, so the interpreter's own bin folder comes first there."""
    import sys
    from pathlib import Path

    from instructor.nbgrader_release import nbgrader_environment

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    env = nbgrader_environment(tmp_path)
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert env["JUPYTER_CONFIG_DIR"] == str(tmp_path)
