"""One implementation: the solution cells of solutions/ are the `course` functions, text for text.

    python -m instructor.one_implementation            # list what differs (functions, given cells)
    python -m instructor.one_implementation --write [NAME ...]   # rewrite them from course

A graded function's solution cell holds its `course` source with nbgrader's `### BEGIN SOLUTION`
after the docstring and `### END SOLUTION` at the end, so the release keeps the signature and the
docstring and stubs the body. What the function calls from its own module (helpers such as
`losses.clipped_surrogate`, classes, constants, and what those call in turn) is in the notebook
too, as the course's own source, with the imports of the names they take from other modules: a
locked "given" code cell before the "your turn" text, after a markdown cell that explains it
(written once with a stub, then kept). `--write` regenerates every given cell. Then run
`python -m instructor.release` to regenerate notebooks/. tests/test_one_implementation.py fails on
any difference in code, docstrings or comments (layout is free) and on a stale given cell.
"""

from __future__ import annotations

import ast
import inspect
import io
import sys
import textwrap
import tokenize
from pathlib import Path

import nbformat

import course
from course.cli import Parser
from course.paths import SOLUTIONS

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


def _module_parts(module) -> tuple[dict, dict, str]:
    """({name: its top-level def, class or assignment}, {name: the import binding it}, source)."""
    source = inspect.getsource(module)
    definitions, imports = {}, {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            definitions[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            definitions.update({t.id: node for t in targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            imports.update({a.asname or a.name: f"from {node.module} import {a.name}"
                            + (f" as {a.asname}" if a.asname else "") for a in node.names})
        elif isinstance(node, ast.Import):
            imports.update({a.asname or a.name.split(".")[0]: f"import {a.name}"
                            + (f" as {a.asname}" if a.asname else "") for a in node.names})
    return definitions, imports, source


def _names_used(node: ast.AST) -> set[str]:
    """The global names a top-level statement reads (a function's own locals excluded)."""
    local = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx,
                                                                                        ast.Load)}
    if isinstance(node, ast.FunctionDef):
        local |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    return {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    } - local


def _segment(source: str, node: ast.stmt) -> str:
    """A top-level statement's source with its decorators and the comment lines just above it."""
    lines = source.splitlines()
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while first > 0 and lines[first - 1].startswith("#"):
        first -= 1
    return "\n".join(lines[first:node.end_lineno])


def given_for(function, bound: set[str]) -> tuple[list[str], list[str]]:
    """What a notebook must have so that `function` runs, beyond the names it already `bound`:
    (import lines, sources of its module's own helpers). The helpers are the transitive closure
    of the non-graded top-level functions, classes and constants of the function's module that
    it uses; the imports bind the names they use from other modules. Constants and classes come
    before functions (a notebook evaluates annotations), each group in module order."""
    module = sys.modules[function.__module__]
    definitions, imports, source = _module_parts(module)
    needed, imported, queue = [], {}, [definitions[function.__name__]]
    seen = {function.__name__}
    while queue:
        for name in sorted(_names_used(queue.pop()) - seen - bound):
            seen.add(name)
            if name in definitions and name not in course.GRADED_FUNCTIONS:
                needed.append(name)
                queue.append(definitions[name])
            elif name in imports or name in course.GRADED_FUNCTIONS:
                imported[name] = imports.get(name) or f"from {module.__name__} import {name}"
    order = {name: definitions[name].lineno for name in needed}
    needed.sort(key=lambda n: (isinstance(definitions[n], ast.FunctionDef), order[n]))
    return _import_lines(imported.values()), [_segment(source, definitions[n]) for n in needed]


def _import_lines(statements) -> list[str]:
    """Import statements sorted like ruff's isort: standard library, third party, course, a blank
    line between groups; `from m import a` merged per module and wrapped at 88 columns."""
    groups: dict[int, list[str]] = {}
    by_module: dict[str, list[str]] = {}
    for statement in sorted(set(statements)):
        if statement.startswith("from "):
            module, name = statement[len("from "):].split(" import ")
            by_module.setdefault(module, []).append(name)
        else:
            groups.setdefault(_import_group(statement.split()[1]), []).append(statement)
    for module, names in by_module.items():
        line = f"from {module} import {', '.join(sorted(names))}"
        if len(line) > 88:
            line = f"from {module} import (\n" + "".join(f"    {n},\n" for n in sorted(names)) + ")"
        groups.setdefault(_import_group(module), []).append(line)
    return ["\n".join(sorted(groups[g], key=_import_order)) for g in sorted(groups)]


def _import_group(module: str) -> int:
    top = module.split(".")[0]
    return 0 if top in sys.stdlib_module_names else 2 if top == "course" else 1


def _import_order(line: str) -> tuple[bool, str]:
    return line.startswith("from "), line.split()[1]


def _bound_names(cells) -> set[str]:
    """Names the top level of these code cells binds (imports, defs, classes, assignments)."""
    bound = set()
    for cell in cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(without_markers(cell.source))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
                bound |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                          and isinstance(n.ctx, ast.Store)}
    return bound


GIVEN = "given_"  # grade_id prefix of the generated cells: given_<function> and given_<function>_md


def _given_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _locked(cell, grade_id: str):
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": grade_id, "locked": True,
                                 "schema_version": 3, "solution": False, "task": False}
    return cell


def with_given_cells(notebook: nbformat.NotebookNode) -> list:
    """The notebook's cells with each graded function's given cell regenerated from course.

    The locked code cell `given_<function>` (imports, then the helpers) sits before the "your
    turn" text that introduces the function's solution cell, after a markdown cell
    `given_<function>_md` that says what the helpers are: written once with a stub, then kept,
    so an author's explanation survives regeneration. A function that needs nothing gets none.
    """
    def generated(cell) -> bool:
        grade_id = _given_id(cell)
        return (cell.cell_type == "code" and grade_id.startswith((GIVEN, "helpers_")))

    cells = [cell for cell in notebook.cells if not generated(cell)]
    for cell in list(cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("solution"):
            continue
        for node in _definitions(cell.source):
            if node.name not in course.GRADED_FUNCTIONS:
                continue
            function = getattr(course, node.name)
            at = cells.index(cell)
            at -= at > 0 and cells[at - 1].cell_type == "markdown"  # the "your turn" text
            has_text = at > 0 and _given_id(cells[at - 1]) == f"{GIVEN}{node.name}_md"
            imports, helpers = given_for(function, _bound_names(cells[:at - has_text]))
            if not imports and not helpers:
                continue
            header = (f"# Given: what {node.name} calls, from {function.__module__}.\n"
                      "# Locked: read it, then call it from your code.")
            code = "\n\n\n".join(["\n\n".join([header, *imports])] + helpers)
            cells.insert(at, _locked(nbformat.v4.new_code_cell(code), GIVEN + node.name))
            if not has_text:
                text = (f"**Given.** The helpers `{node.name}` calls, from "
                        f"`{function.__module__}`: read them, then call them from your code.")
                cells.insert(at, _locked(nbformat.v4.new_markdown_cell(text),
                                         f"{GIVEN}{node.name}_md"))
    return cells


def _sources(cells) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source) for cell in cells]


def stale_given_cells(solutions: Path = SOLUTIONS) -> list[str]:
    """The solution notebooks whose given cells are missing or not what course makes now."""
    return [path.name for path in sorted(solutions.glob("*.ipynb"))
            if _sources(with_given_cells(notebook := nbformat.read(path, as_version=4)))
            != _sources(notebook.cells)]


def write_solution_cells(names: list[str], solutions: Path = SOLUTIONS) -> list[Path]:
    """Rewrite the solution cells of `names` from course and regenerate every given cell;
    the notebooks written."""
    written = []
    for path in sorted(solutions.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        before = _sources(notebook.cells)
        for cell in notebook.cells:
            if cell.cell_type != "code" or not cell.metadata.get("nbgrader", {}).get("solution"):
                continue
            for name in [n.name for n in _definitions(cell.source) if n.name in names]:
                cell.source = solution_cell(getattr(course, name))
        notebook.cells = with_given_cells(notebook)
        if _sources(notebook.cells) != before:
            nbformat.write(notebook, path)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m instructor.one_implementation",
                    description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the differing solution cells "
                                                             "from course")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="only these graded functions (default: every one that differs)")
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.names) - set(course.GRADED_FUNCTIONS)):
        parser.error(f"argument NAME: not graded functions: {', '.join(unknown)}")
    names = [name for name in differing() if not args.names or name in args.names]
    if args.write:
        for path in write_solution_cells(names):
            print(f"wrote {path}")
        return
    stale = stale_given_cells()
    if names:
        print("differ from course: " + ", ".join(names))
    if stale:
        print("given cells out of date: " + ", ".join(stale))
    if names or stale:
        sys.exit(1)


if __name__ == "__main__":
    main()
