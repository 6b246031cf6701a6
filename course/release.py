"""Regenerate the student notebooks (notebooks/) from the instructor notebooks (solutions/).

    python -m course.release              # common-mistakes cells, then notebooks/ from solutions/
    python -m course.release --force      # ... even over notebooks edited since the last release
    python -m course.release --check      # exit 1 if either is out of date; write nothing
    python -m course.release --html OUT   # executed HTML pages that read offline (course.html_export)
    python -m course.release --student-edition DIR [--reveal 1,2]   # a folder for students
                                          # (course.edition): the reference of revealed stages only

First it rewrites the "Common mistakes" cell of every solution notebook from the autograder's
checks (`course.mistakes`), and sets the nbgrader `points` of every self-check cell to its
function's points in `course.registry` (`registry_points`), so one command brings both up to date
after the checks change; the release sets those points on its own copies too, so it cannot drift
from the autograder's scale.
It never overwrites (or deletes) a notebook in notebooks/ that was edited since the release wrote
it, such as a student's answers: it writes nothing, names them and says how to proceed
(`course.manifest`, which records what each release wrote in notebooks/.release-manifest.json).

This runs the real nbgrader (`nbgrader generate_assignment`, https://nbgrader.readthedocs.io) in a
throw-away course directory laid out as nbgrader expects:

    <tmp>/source/grpo/*.ipynb  --generate_assignment-->  <tmp>/release/grpo/*.ipynb  -->  notebooks/

nbgrader replaces each `### BEGIN SOLUTION` ... `### END SOLUTION` region with a stub that raises
`NotImplementedError`, clears outputs, and records cell checksums so that `nbgrader autograde` can
restore locked and test cells. The settings that shape the output are passed on the command line
and user Jupyter config is kept out, so the same solutions/ always give the same bytes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from course.cli import Parser
from course.manifest import EditedNotebooks, write_notebooks
from course.mistakes import stale_notebooks, write_sections
from course.registry import POINTS, STAGES

REPO_ROOT = Path(__file__).resolve().parent.parent
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
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    # nbgrader runs its database migrations with the `alembic` command found on PATH: the one
    # beside this interpreter, even when its virtualenv is not activated
    env["PATH"] = os.pathsep.join(p for p in (str(Path(sys.executable).parent), env.get("PATH")) if p)
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
            f"nbgrader {args[0]} failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
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
    gives its function (`course.registry.POINTS`; a stage key: the stage's sum); True if any changed."""
    changed = False
    for cell in notebook.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or meta.get("solution"):
            continue
        names = SELF_CHECKED.findall(cell.source)
        if len(names) != 1 or not (names[0] in POINTS or names[0] in STAGES):
            raise ValueError(f"check cell {meta.get('grade_id')!r} must run self_check on one graded "
                             f"function or stage, runs it on {names}")
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


def generate_release(solutions_dir: Path, output_dir: Path) -> list[Path]:
    """Write nbgrader's student version of every notebook in `solutions_dir` into `output_dir`.

    `output_dir` must not exist yet or be empty of notebooks we would not write; returns the paths written.
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
        run_nbgrader(["generate_assignment", ASSIGNMENT, "--force"], course_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for notebook in notebooks:
            released = course_dir / "release" / ASSIGNMENT / notebook.name
            target = output_dir / notebook.name
            shutil.copyfile(released, target)
            written.append(target)
    return written


def stale_files(solutions_dir: Path, notebooks_dir: Path) -> list[str]:
    """Names of notebooks in `notebooks_dir` that differ from a fresh release (or are missing/extra)."""
    with tempfile.TemporaryDirectory(prefix="grpo_release_check_") as tmp:
        fresh = {p.name: p.read_bytes() for p in generate_release(solutions_dir, Path(tmp))}
    current = {p.name: p.read_bytes() for p in notebooks_dir.glob("*.ipynb")}
    return sorted(name for name in fresh.keys() | current.keys() if fresh.get(name) != current.get(name))


def _stages(text: str) -> tuple[str, ...]:
    from course.edition import parse_reveal

    try:
        return parse_reveal(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _student_edition(parser: argparse.ArgumentParser, args) -> int:
    from course.edition import build_edition, check_target

    try:
        check_target(args.student_edition)
    except ValueError as error:
        parser.error(f"--student-edition: {error}")
    try:
        revealed = args.reveal or ()
        written = build_edition(args.student_edition, revealed, args.force, args.solutions)
    except EditedNotebooks as refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    except ValueError as error:  # stale stored cases
        print(f"error: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    print(f"wrote the student edition in {args.student_edition} (references revealed: "
          f"{', '.join(revealed) or 'none'}); students run `pip install -e .` there")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course.release", description=__doc__.splitlines()[0])
    parser.add_argument("--solutions", type=Path, default=REPO_ROOT / "solutions")
    parser.add_argument("--notebooks", type=Path, default=REPO_ROOT / "notebooks")
    parser.add_argument("--check", action="store_true", help="only report drift; write nothing")
    parser.add_argument("--html", type=Path, metavar="OUT",
                        help="write executed HTML pages that read offline into OUT (nothing else)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="with --html: these notebooks only")
    parser.add_argument("--student-edition", type=Path, metavar="DIR",
                        help="write the student edition into DIR (nothing else): notebooks, support "
                             "code, a stored-only autograder, the reference of --reveal stages only")
    parser.add_argument("--reveal", type=_stages, metavar="STAGES",
                        help="with --student-edition: the stages whose reference it holds, as "
                             "numbers or keys separated by commas (1,2 or 1_tokenization), 'all' "
                             "or 'none' (the default)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite notebooks edited since the last release (with --html: "
                             "existing pages)")
    args = parser.parse_args(argv)
    if args.only and args.html is None:
        parser.error("--only goes with --html")
    if args.student_edition is not None:
        if args.html is not None or args.check:
            parser.error("--student-edition goes without --html and --check")
        return _student_edition(parser, args)
    if args.reveal is not None:
        parser.error("--reveal goes with --student-edition")

    if args.html is not None:
        from course.html_export import export_all  # nbconvert and latex2mathml only when asked

        try:
            pages = export_all(args.solutions, args.notebooks, args.html, args.only, args.force)
        except (ValueError, FileExistsError) as error:
            parser.error(str(error))
        for page in pages:
            print(f"wrote {page}")
        return 0

    if args.check:
        stale_cells = stale_notebooks(args.solutions)
        for name in stale_cells:
            print(f"out of date: {args.solutions / name} (its common-mistakes cell)")
        stale_points = write_registry_points(solution_notebooks(args.solutions), write=False)
        for path in stale_points:
            print(f"out of date: {path} (its check cells' points)")
        stale = stale_files(args.solutions, args.notebooks)
        for name in stale:
            print(f"out of date: {args.notebooks / name}")
        current = not stale and not stale_cells and not stale_points
        print("solutions/ and notebooks/ are up to date" if current else "run `python -m course.release`")
        return 0 if current else 1

    for path in write_sections(args.solutions):
        print(f"wrote {path} (its common-mistakes cell)")
    for path in write_registry_points(solution_notebooks(args.solutions)):
        print(f"wrote {path} (its check cells' points, from course.registry)")
    with tempfile.TemporaryDirectory(prefix="grpo_release_new_") as tmp:
        new = {p.name: p.read_bytes() for p in generate_release(args.solutions, Path(tmp))}
    # released notebooks whose solution is gone go too; README.md and anything else stay
    removed = [p.name for p in args.notebooks.glob("*.ipynb") if p.name not in new]
    try:
        written = write_notebooks(args.notebooks, new, removed, force=args.force,
                                  elsewhere="--notebooks DIR")
    except EditedNotebooks as refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
