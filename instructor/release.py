"""Regenerate the student notebooks (notebooks/) from the instructor notebooks (solutions/).

    # common-mistakes cells, then notebooks/ from solutions/
    python -m instructor.release
    # ... even over notebooks edited since the last release
    python -m instructor.release --force
    python -m instructor.release --check      # exit 1 if either is out of date; write nothing
    # executed HTML pages that read offline (instructor.html_export)
    python -m instructor.release --html OUT
    python -m instructor.release --student-edition DIR [--reveal 1,2]   # a folder for students
                                          # (instructor.edition): the reference of revealed stages
                                          only

First it rewrites the "Common mistakes" cell of every solution notebook from the autograder's
checks (`instructor.mistakes`), and sets the nbgrader `points` of every self-check cell to its
function's points in `course.registry` (`registry_points`), so one command brings both up to date
after the checks change; the release sets those points on its own copies too, so it cannot drift
from the autograder's scale.
It never overwrites (or deletes) a notebook in notebooks/ that was edited since the release wrote
it, such as a student's answers: it writes nothing, names them and says how to proceed
(`instructor.manifest`, which records what each release wrote in notebooks/.release-manifest.json).

The notebooks come from the real nbgrader (`instructor.nbgrader_release`).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

from course.cli import Parser, unwritable
from course.paths import ROOT, SOLUTIONS
from instructor.manifest import EditedNotebooks, write_notebooks
from instructor.mistakes import stale_notebooks, write_sections
from instructor.nbgrader_release import (
    generate_release,
    solution_notebooks,
    stale_files,
    write_registry_points,
)


def _stages(text: str) -> tuple[str, ...]:
    from instructor.edition import parse_reveal

    try:
        return parse_reveal(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _student_edition(parser: argparse.ArgumentParser, args) -> int:
    from instructor.edition import build_edition, check_target

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


def _written_folder(args) -> tuple[str, Path] | None:
    """(flag, folder): where this mode writes, checked before any work; None for --check."""
    if args.html is not None:
        return "--html", args.html
    if args.student_edition is not None:
        return "--student-edition", args.student_edition
    return None if args.check else ("--notebooks", args.notebooks)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m instructor.release", description=__doc__.splitlines()[0])
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS)
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks")
    parser.add_argument("--check", action="store_true", help="only report drift; write nothing")
    parser.add_argument("--html", type=Path, metavar="OUT",
                        help="write executed HTML pages that read offline into OUT (nothing else)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="with --html: these notebooks "
                                                                  "only")
    parser.add_argument("--student-edition", type=Path, metavar="DIR",
                        help="write the student edition into DIR (nothing else): notebooks, "
                             "support "
                             "code, a stored-only autograder, the reference of --reveal stages "
                             "only")
    parser.add_argument("--reveal", type=_stages, metavar="STAGES",
                        help="with --student-edition: the stages whose reference it holds, as "
                             "numbers or keys separated by commas (1,2 or 1_tokenization), 'all' "
                             "or 'none' (the default)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite notebooks edited since the last release (with --html: "
                             "existing pages)")
    args = parser.parse_args(argv)
    if (written := _written_folder(args)) and (problem := unwritable(written[1])):
        parser.error(f"argument {written[0]}: {problem}")
    if args.html is None and importlib.util.find_spec("nbgrader") is None:
        parser.error("the release runs nbgrader, which is not installed: pip install -e "
                     "\".[instructor]\"")
    if args.only and args.html is None:
        parser.error("--only goes with --html")
    if args.student_edition is not None:
        if args.html is not None or args.check:
            parser.error("--student-edition goes without --html and --check")
        return _student_edition(parser, args)
    if args.reveal is not None:
        parser.error("--reveal goes with --student-edition")

    if args.html is not None:
        from instructor.html_export import export_all  # nbconvert and latex2mathml only when asked

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
        print("solutions/ and notebooks/ are up to date" if current else "run `python -m "
                                                                         "instructor.release`")
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
