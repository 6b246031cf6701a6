"""nbgrader's student version of the instructor notebooks: `generate_release` and its helpers.

This runs the real nbgrader (`nbgrader generate_assignment`, https://nbgrader.readthedocs.io) in a
throw-away course directory laid out as nbgrader expects:

    <tmp>/source/grpo/*.ipynb  --generate_assignment-->  <tmp>/release/grpo/*.ipynb  -->  notebooks/

nbgrader replaces each `### BEGIN SOLUTION` ... `### END SOLUTION` region with a stub that raises
`NotImplementedError`, clears outputs, and records cell checksums so that `nbgrader autograde` can
restore locked and test cells. The settings that shape the output are passed on the command line
and user Jupyter config is kept out, so the same solutions/ always give the same bytes. The
nbgrader `points` of every self-check cell are its function's points in `course.registry`
(`registry_points`), so the release cannot drift from the autograder's scale; a written answer's
are `course.registry.WRITTEN`'s.
"""


from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from course.paths import ROOT
from course.registry import POINTS, STAGES, WRITTEN

ASSIGNMENT = "grpo"  # the nbgrader assignment id the release, the tests and instructors share

# Written into the throw-away course's nbgrader_config.py (which outranks system-wide Jupyter
# config; user config is switched off below), so the same solutions/ always give the same bytes.
NBGRADER_CONFIG = """\
c = get_config()
c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.IncludeHeaderFooter.header = ""
c.IncludeHeaderFooter.footer = ""
"""


def nbgrader_environment(config_dir: Path) -> dict[str, str]:
    """The environment for an nbgrader subprocess: no user config, repo importable."""
    env = dict(os.environ)
    env["JUPYTER_CONFIG_DIR"] = str(config_dir)  # an empty folder: ignore ~/.jupyter
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    # nbgrader runs its database migrations with the `alembic` command found on PATH: the one
    # beside this interpreter, even when its virtualenv is not activated
    env["PATH"] = os.pathsep.join(p for p in (str(Path(sys.executable).parent), env.get("PATH"))
                                  if p)
    return env


def run_nbgrader(args: list[str], course_dir: Path) -> subprocess.CompletedProcess:
    """Run `python -m nbgrader <args>` in `course_dir`; raise with its log if it fails."""
    config_dir = course_dir / ".jupyter_config"
    config_dir.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "nbgrader", *args, f"--course-dir={course_dir}"]
    result = subprocess.run(
        command, cwd=course_dir, env=nbgrader_environment(config_dir),
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"nbgrader {args[0]} failed (exit "
            f"{result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def solution_notebooks(solutions_dir: Path) -> list[Path]:
    notebooks = sorted(solutions_dir.glob("*.ipynb"))
    if not notebooks:
        raise ValueError(f"solutions_dir={solutions_dir} holds no .ipynb files")
    return notebooks


SELF_CHECKED = re.compile(r'self_check\(\s*"(\w+)"')  # the function (or stage) a check cell grades


def registry_points(notebook: nbformat.NotebookNode) -> bool:
    """Set the nbgrader `points` of each self-check cell of `notebook` to what `pytest autograder`
    gives its function (`course.registry.POINTS`; a stage key: the stage's sum), and of each written
    answer to `course.registry.WRITTEN`'s; True if any changed."""
    changed = False
    for cell in notebook.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade"):
            continue
        if meta.get("solution"):  # a written answer, graded by a person
            if meta.get("grade_id") not in WRITTEN:
                raise ValueError(f"written answer {meta.get('grade_id')!r} has no points in "
                                 "course.registry.WRITTEN")
            points = WRITTEN[meta["grade_id"]]
        else:
            names = SELF_CHECKED.findall(cell.source)
            if len(names) != 1 or not (names[0] in POINTS or names[0] in STAGES):
                raise ValueError(f"check cell {meta.get('grade_id')!r} must run self_check on one "
                                 f"graded function or stage, runs it on {names}")
            points = sum(POINTS[name] for name in STAGES.get(names[0], names))
        if meta.get("points") != points:
            meta["points"] = points
            changed = True
    return changed


def write_registry_points(notebooks: list[Path], write: bool = True) -> list[Path]:
    """The notebooks whose check cells' points differ from the registry (rewritten when `write`)."""
    stale = []
    for path in notebooks:
        notebook = nbformat.read(path, as_version=4)
        if registry_points(notebook):
            stale.append(path)
            if write:
                nbformat.write(notebook, path)
    return stale


def generate_release(solutions_dir: Path, output_dir: Path, gradebook: bool = False) -> list[Path]:
    """Write nbgrader's student version of every notebook in `solutions_dir` into `output_dir`.

    `output_dir` must not exist yet or be empty of notebooks we would not write; returns the paths
    written. `gradebook`: let nbgrader make its gradebook first, as its own command does (which a
    release does not need: benchmarks/bench_release.py times both).
    """
    notebooks = solution_notebooks(solutions_dir)
    with tempfile.TemporaryDirectory(prefix="grpo_release_") as tmp:
        course_dir = Path(tmp)
        (course_dir / "nbgrader_config.py").write_text(NBGRADER_CONFIG)
        source = course_dir / "source" / ASSIGNMENT
        source.mkdir(parents=True)
        for notebook in notebooks:
            shutil.copyfile(notebook, source / notebook.name)
        write_registry_points([source / notebook.name for notebook in notebooks])
        # --no-db: a release needs no gradebook, and making one runs alembic in a subprocess (more
        # than half of a release's time); the notebooks are the same bytes either way
        run_nbgrader(["generate_assignment", ASSIGNMENT, "--force", *([] if gradebook
                                                                      else ["--no-db"])],
                     course_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for notebook in notebooks:
            released = course_dir / "release" / ASSIGNMENT / notebook.name
            target = output_dir / notebook.name
            shutil.copyfile(released, target)
            written.append(target)
    return written


def stale_files(solutions_dir: Path, notebooks_dir: Path) -> list[str]:
    """Names of notebooks in `notebooks_dir` that differ from a fresh release (or are
    missing/extra)."""
    with tempfile.TemporaryDirectory(prefix="grpo_release_check_") as tmp:
        fresh = {p.name: p.read_bytes() for p in generate_release(solutions_dir, Path(tmp))}
    current = {p.name: p.read_bytes() for p in notebooks_dir.glob("*.ipynb")}
    return sorted(name for name in fresh.keys() | current.keys()
                  if fresh.get(name) != current.get(name))
