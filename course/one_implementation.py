"""One implementation: the solution cells of solutions/ are the `course` functions, text for text.

    python -m course.one_implementation            # list the graded functions that differ
    python -m course.one_implementation --write [NAME ...]   # rewrite those (or NAME's) cells from course

A graded function's solution cell holds its `course` source with nbgrader's `### BEGIN SOLUTION`
after the docstring and `### END SOLUTION` at the end, so the release keeps the signature and the
docstring and stubs the body. A course helper that the function calls (a module-level function of
its own module, e.g. `losses.clipped_surrogate`) must be defined in the notebook too: `--write`
adds the missing ones in one locked cell before the first solution cell that needs them. Then run
`python -m course.release` to regenerate notebooks/. tests/test_one_implementation.py fails on
any difference in code, docstrings or comments (layout is free).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import sys
import textwrap
import tokenize
from pathlib import Path

import nbformat

import course

SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def without_markers(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if line.strip() not in MARKERS)


def _definitions(source: str) -> list[ast.FunctionDef]:
    try:
        tree = ast.parse(without_markers(source))
    except SyntaxError:  # a cell with IPython magics defines no graded function
        return []
    return [node for node in tree.body if isinstance(node, ast.FunctionDef)]


def solution_sources(solutions: Path = SOLUTIONS) -> dict[str, tuple[str, str]]:
    """{graded function name: (its source in a solution notebook, the notebook's name)}."""
    found = {}
    for path in sorted(solutions.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            source = without_markers(cell.source)
            for node in _definitions(source):
                if node.name in course.GRADED_FUNCTIONS:
                    found[node.name] = (ast.get_source_segment(source, node), path.name)
    return found


def normalized(source: str) -> tuple[str, list[str]]:
    """(the syntax tree, the comments) of one function's source: what must be equal."""
    source = textwrap.dedent(without_markers(source))
    comments = [token.string for token in tokenize.generate_tokens(io.StringIO(source).readline)
                if token.type == tokenize.COMMENT]
    return ast.dump(ast.parse(source), indent=1), comments


def differing(solutions: Path = SOLUTIONS) -> list[str]:
    """The graded functions whose solution cell is missing or is not the course function."""
    found = solution_sources(solutions)
    return [name for name in course.GRADED_FUNCTIONS if name not in found
            or normalized(found[name][0]) != normalized(inspect.getsource(getattr(course, name)))]


def solution_cell(function) -> str:
    """The course function's source with nbgrader's markers around the body."""
    source = textwrap.dedent(inspect.getsource(function)).rstrip("\n")
    docstring_end = ast.parse(source).body[0].body[0].end_lineno
    lines = source.splitlines()
    return "\n".join(lines[:docstring_end] + ["    " + MARKERS[0]] + lines[docstring_end:]
                     + ["    " + MARKERS[1]])


def course_helpers(function) -> list:
    """The module-level, non-graded functions of the function's own module that it calls."""
    module = sys.modules[function.__module__]
    called = {node.id for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(function))))
              if isinstance(node, ast.Name)}
    return [getattr(module, name) for name in sorted(called)
            if inspect.isfunction(getattr(module, name, None)) and name not in course.GRADED_FUNCTIONS
            and getattr(module, name).__module__ == module.__name__]


def write_solution_cells(names: list[str], solutions: Path = SOLUTIONS) -> list[Path]:
    """Rewrite the solution cells of `names` from course (adding missing helpers); the notebooks written."""
    written = []
    for path in sorted(solutions.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        defined = {node.name for cell in notebook.cells if cell.cell_type == "code"
                   for node in _definitions(cell.source)}
        changed = False
        for cell in list(notebook.cells):
            if cell.cell_type != "code" or not cell.metadata.get("nbgrader", {}).get("solution"):
                continue
            for name in [n.name for n in _definitions(cell.source) if n.name in names]:
                function = getattr(course, name)
                cell.source, changed = solution_cell(function), True
                missing = [h for h in course_helpers(function) if h.__name__ not in defined]
                if missing:  # before the "your turn" text that introduces the solution cell
                    at = notebook.cells.index(cell)
                    at -= at > 0 and notebook.cells[at - 1].cell_type == "markdown"
                    notebook.cells.insert(at, _helper_cell(missing, function))
                    defined |= {h.__name__ for h in missing}
        if changed:
            nbformat.write(notebook, path)
            written.append(path)
    return written


def _helper_cell(helpers: list, caller) -> nbformat.NotebookNode:
    """A locked code cell defining `helpers`, the course's own, which `caller` uses."""
    header = (f"# Given: the helpers {caller.__name__} calls, from {caller.__module__}\n"
              "# (read them, then call them from your code)")
    cell = nbformat.v4.new_code_cell("\n\n\n".join(
        [header] + [textwrap.dedent(inspect.getsource(h)).rstrip("\n") for h in helpers]))
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": "helpers_" + "_".join(h.__name__ for h in helpers),
                                 "locked": True, "schema_version": 3, "solution": False, "task": False}
    return cell


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course.one_implementation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the differing solution cells from course")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="only these graded functions (default: every one that differs)")
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.names) - set(course.GRADED_FUNCTIONS)):
        parser.error(f"argument NAME: not graded functions: {', '.join(unknown)}")
    names = [name for name in differing() if not args.names or name in args.names]
    if args.write:
        for path in write_solution_cells(names):
            print(f"wrote {path}")
    elif names:
        print("differ from course: " + ", ".join(names))
        sys.exit(1)


if __name__ == "__main__":
    main()
