"""Reading a submission without running it: a folder of notebooks, one notebook, a .py, or a module.

Notebooks are read, not run. From each code cell we keep the statements that define things —
imports, `def`, `class`, and assignments to UPPER_CASE constants (2+ characters, so that `N = ...`
stays exploration) — and drop everything else
(exploration, plots, training loops, self-check calls), so a cell that trains for an hour or calls
`os._exit` at top level never runs. IPython magics (`%...`, `!...`) are dropped before parsing.
When several notebooks are given, a graded name defined with `def` wins over one merely imported.
A graded name that a locked cell (nbgrader's "given" and setup cells) defines or imports never
counts as the student's implementation: those cells are the course's code, not the student's.

A notebook is hostile input too: any JSON shape, bytes that are not UTF-8, a cell nested too deeply
for the parser, a huge cell or a hundred thousand of them. The work is bounded (file size, JSON
values built, cells, characters parsed), a malformed cell or notebook costs only its own
definitions, and each problem is reported with what was skipped; reading a submission never raises.
The bound on JSON values bounds memory, not only bytes: 48 MB of nested empty lists would build
16 million Python lists (1.5 GB) before anything could look at them.

A .py submission runs in the sandbox's stage children, under user ids of their own, which cannot
enter a folder only its owner may (an upload in a 0700 folder). So the trusted side reads it and the
.py files beside it, its helpers (no links followed, size-capped), and sends their text with the
request (`Submission.files`): the sandbox shows no folder of the submission's, so one template can
serve any notebook or .py submission (`instructor.batch` starts the next one ahead). What cannot be
read is `SubmissionUnreadable`, a usage error.
"""

from __future__ import annotations

import ast
import errno
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from course.registry import GRADED_FUNCTIONS
from course.submissions.parsing import parse

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
KEPT = (ast.Import, ast.ImportFrom, *DEFINITIONS)
# Bounds on the work a submission can make the grader do before anything runs. The course's
# notebooks are ~40 kB with under 40 cells, the longest cell ~8 kB; outputs (plots) can add MBs.
MAX_NOTEBOOK_BYTES = 50 * 2**20  # one notebook file, outputs included
MAX_CELLS = 5_000  # cells read per notebook
MAX_CELL_CHARS = 256 * 2**10  # one code cell's source
MAX_SOURCE_CHARS = 2 * 2**20  # code cells parsed, all notebooks together
MAX_NOTEBOOKS = 100  # notebooks read from one folder
MAX_REPORTED = 5  # skipped cells named one by one per notebook
# JSON values (objects, lists, and the items they hold) in one notebook: the course's hold ~3,000
MAX_JSON_VALUES = 1_000_000
MAX_PY_BYTES = 4 * 2**20  # one .py file (the reference, all stages, is ~100 kB)
MAX_PY_FILES = 50  # .py files read beside a .py submission (its own helpers)
MAX_PY_TOTAL_BYTES = 16 * 2**20  # the submission and its helpers together
JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


class NotebookError(ValueError):
    """A notebook that cannot be read at all (the message says why)."""


class SubmissionUnreadable(ValueError):
    """The trusted side cannot read the submission (a usage error: the message names the path)."""


@dataclass
class Submission:
    """What the worker should load. kind: "module" (importable name), "py" (file) or "units"."""

    kind: str
    target: str
    units: list = field(default_factory=list)  # [{"name", "statements": [(label, source)]}]
    providers: dict = field(default_factory=dict)  # graded name -> unit index
    problems: list = field(default_factory=list)  # syntax errors etc., reported with each check
    files: dict = field(default_factory=dict)  # a .py's text and its helpers': file name -> text

    @property
    def is_reference(self) -> bool:
        return self.kind == "module" and self.target == "course"

    def to_request(self) -> dict:
        return {"kind": self.kind, "target": self.target, "units": self.units,
                "providers": self.providers, "files": self.files}


def _is_constant_assignment(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets = [node.target]
    else:
        return False
    # UPPER_CASE of 2+ characters: `MAX_LEN = 64` is a constant, `B, T = x.shape` is exploration
    return all(isinstance(t, ast.Name) and t.id.isupper() and len(t.id) > 1 for t in targets)


def _strip_magics(source: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())


def _read_bytes(path: Path, follow_links: bool, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The file's bytes, at most `limit`; never blocks on a pipe or reads a device."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except OSError as exc:
        raise NotebookError("it is a link" if exc.errno == errno.ELOOP
                            else f"it cannot be opened ({exc.strerror})") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise NotebookError("it is not a regular file")
        if info.st_size > limit:
            raise NotebookError(f"it is {info.st_size / 2**20:.0f} MB, over the limit of "
                                f"{limit / 2**20:g} MB")
        return handle.read(limit + 1)[:limit]


def json_values(data: bytes) -> int:
    """How many JSON values `data` would build, at most: its commas and openings outside strings
    (counted in them too, first, since that is cheap and nearly always under the limit)."""
    rough = data.count(b",") + data.count(b"[") + data.count(b"{")
    if rough <= MAX_JSON_VALUES:
        return rough
    skeleton = JSON_STRING.sub(b"", data)
    return skeleton.count(b",") + skeleton.count(b"[") + skeleton.count(b"{")


def _notebook_cells(data: bytes) -> list:
    values = json_values(data)
    if values > MAX_JSON_VALUES:
        raise NotebookError(f"its JSON holds about {values:,} values, over the limit of "
                            f"{MAX_JSON_VALUES:,} (a notebook's cells need far fewer)")
    try:
        notebook = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise NotebookError(f"it is not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise NotebookError("its JSON is nested too deeply") from None
    except ValueError as exc:
        raise NotebookError(f"it is not JSON ({str(exc)[:100]})") from None
    if not isinstance(notebook, dict):
        raise NotebookError(f"its JSON is {_json_kind(notebook)}, not a notebook object")
    if not isinstance(notebook.get("cells"), list):
        raise NotebookError("it has no list of cells")
    return notebook["cells"]


def _json_kind(value) -> str:
    kinds = {dict: "an object", list: "a list", str: "text", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _cell_source(cell) -> str | None:
    """The source of a code cell (None for any other cell); TypeError if it is malformed."""
    if not isinstance(cell, dict):
        raise TypeError(f"the cell is {_json_kind(cell)}, not an object")
    if cell.get("cell_type") != "code":
        return None
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        source = "".join(source)
    if not isinstance(source, str):
        what = "a list of more than text" if isinstance(source, list) else _json_kind(source)
        raise TypeError(f"its source is {what}, not text")
    return source


def read_notebook(path: Path, follow_links: bool = True,
                  budget: int = MAX_SOURCE_CHARS) -> tuple[dict, list, int]:
    """One notebook -> a unit of kept statements, the problems found (each says what was skipped)
    and the characters of code parsed (at most `budget`). A malformed cell costs only that cell;
    NotebookError if the notebook cannot be read at all."""
    cells = _notebook_cells(_read_bytes(path, follow_links))
    statements, problems, defined, imported = [], [], set(), set()
    parsed = 0
    skipped = []  # (cell number, why)
    if len(cells) > MAX_CELLS:
        problems.append(f"{path.name}: only the first {MAX_CELLS:,} of its {len(cells):,} cells "
                        "were read")
    number = 0
    for index, cell in enumerate(cells[:MAX_CELLS], start=1):
        try:
            source = _cell_source(cell)
        except TypeError as exc:
            skipped.append((f"cell {index}", str(exc)))
            continue
        if source is None:
            continue
        number += 1
        label = f"{path.name}, code cell {number}"
        if len(source) > MAX_CELL_CHARS:
            skipped.append((f"code cell {number}", f"{len(source):,} characters, over the limit "
                                                   f"of {MAX_CELL_CHARS:,}"))
            continue
        if parsed + len(source) > budget:
            skipped.append((f"code cell {number}", f"not read: the submission's code cells "
                                                   f"before it hold {MAX_SOURCE_CHARS:,} "
                                                   "characters"))
            continue
        parsed += len(source)
        try:
            tree = parse(_strip_magics(source), filename=label)
            kept = [(node, ast.unparse(node)) for node in tree.body
                    if isinstance(node, KEPT) or _is_constant_assignment(node)]
        except SyntaxError as exc:
            skipped.append((f"code cell {number}", f"SyntaxError: {exc.msg} (line {exc.lineno})"))
            continue
        except ValueError as exc:  # a null byte: ValueError in some CPython 3.11 releases
            if "\0" in source:
                skipped.append((f"code cell {number}", "SyntaxError: source code cannot contain "
                                                       "null bytes"))
                continue
            skipped.append((f"code cell {number}", f"too complex to read ({type(exc).__name__}: "
                                                   "an expression nested too deeply?)"))
            continue
        except (RecursionError, MemoryError) as exc:
            skipped.append((f"code cell {number}", f"too complex to read ({type(exc).__name__}: "
                                                   "an expression nested too deeply?)"))
            continue
        # a given (locked) cell's names run, for the helpers they bind, but never count as the
        # student's implementation of a graded function
        given = _is_given(cell)
        for node, text in kept:
            statements.append((f"{label}, line {node.lineno}", text))
            if isinstance(node, DEFINITIONS):
                names = {node.name}
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = {(a.asname or a.name).split(".")[0] for a in node.names}
            else:
                continue
            (defined if isinstance(node, DEFINITIONS) else imported).update(
                names - set(GRADED_FUNCTIONS) if given else names)
    problems += [f"{path.name}, {where}: {why}; the definitions in this cell were not graded"
                 for where, why in skipped[:MAX_REPORTED]]
    if len(skipped) > MAX_REPORTED:
        problems.append(f"{path.name}: {len(skipped) - MAX_REPORTED:,} more cells were skipped")
    unit = {"name": path.name, "statements": statements, "defined": sorted(defined),
            "imported": sorted(imported)}
    return unit, problems, parsed


def _is_given(cell: dict) -> bool:
    """A locked cell that is not the student's to write (nbgrader's metadata: setup, given
    helpers, self-checks), as the course's releases mark them."""
    marks = cell.get("metadata", {}).get("nbgrader") if isinstance(cell.get("metadata"),
                                                                   dict) else None
    return isinstance(marks, dict) and marks.get("locked") is True and not marks.get("solution")


def _assign_providers(units: list) -> dict:
    providers = {}
    for name in GRADED_FUNCTIONS:
        for index, unit in enumerate(units):  # a def anywhere wins; the last def wins among defs
            if name in unit["defined"]:
                providers[name] = index
        if name not in providers:
            for index, unit in enumerate(units):
                if name in unit["imported"]:
                    providers[name] = index
    return providers


def load_submission(spec: str | Path, root: Path) -> Submission:
    """Resolve `--submission` (a path or a module name) without executing anything."""
    path = Path(spec)
    looks_like_module = (
        "/" not in str(spec)
        and path.suffix == ""
        and str(spec).replace(".", "").replace("_", "").isalnum()
    )
    if looks_like_module and not (root / path).is_dir() or (root / path / "__init__.py").exists():
        return Submission("module", str(spec))
    if not path.is_absolute() and not path.exists() and (root / path).exists():
        path = root / path
    if path.is_dir():
        notebooks = sorted(path.glob("*.ipynb"))
        if not notebooks:
            py_files = sorted(path.glob("*.py"))
            if len(py_files) == 1:
                return _from_py(py_files[0])
            return Submission("units", str(path), problems=[f"no notebooks found in {path}"])
        return _from_notebooks(notebooks, str(path), follow_links=False)
    if path.suffix == ".ipynb" and path.exists():
        return _from_notebooks([path], str(path), follow_links=True)
    if path.suffix == ".py" and path.exists():
        return _from_py(path)
    if looks_like_module:
        return Submission("module", str(spec))
    return Submission("units", str(spec), problems=[f"submission {spec} not found"])


def _read_py(path: Path, follow_links: bool) -> bytes:
    try:
        return _read_bytes(path, follow_links, MAX_PY_BYTES)
    except NotebookError as exc:
        raise SubmissionUnreadable(f"--submission {path}: cannot be read: {exc}") from None


def _from_py(path: Path) -> Submission:
    """A .py submission, read with the .py files beside it (its helpers, in name order, while
    they fit `MAX_PY_TOTAL_BYTES`); a helper that is a link, too large or unreadable is left out."""
    text = _read_py(path, follow_links=True).decode("utf-8", "replace")
    files, total = {path.name: text}, len(text)
    siblings = sorted(p for p in path.parent.glob("*.py") if p.name != path.name)
    for sibling in siblings[:MAX_PY_FILES]:
        try:
            helper = _read_py(sibling, follow_links=False).decode("utf-8", "replace")
        except (SubmissionUnreadable, OSError):
            continue
        if total + len(helper) > MAX_PY_TOTAL_BYTES:
            break
        files[sibling.name], total = helper, total + len(helper)
    return Submission("py", str(path), files=files)


def _from_notebooks(paths: list, target: str, follow_links: bool) -> Submission:
    """Read each notebook; an unreadable one costs only its own points, and says why."""
    units, problems, budget = [], [], MAX_SOURCE_CHARS
    if len(paths) > MAX_NOTEBOOKS:
        problems.append(f"only the first {MAX_NOTEBOOKS} of {len(paths)} notebooks were read")
    for path in paths[:MAX_NOTEBOOKS]:
        try:
            unit, found, parsed = read_notebook(path, follow_links, budget)
        except NotebookError as exc:
            problems.append(f"{path.name}: could not be read as a notebook: {exc}; "
                            "none of its definitions were graded")
            continue
        except Exception as exc:  # never crash on a submission: say so and grade the rest
            problems.append(f"{path.name}: could not be read as a notebook "
                            f"({type(exc).__name__}); none of its definitions were graded")
            continue
        budget -= parsed
        units.append(unit)
        problems.extend(found)
    # a notebook that provides no graded function (07, 08, a scratch notebook) is not loaded: a
    # graded function lives in its own notebook's namespace, so nothing of that one can reach it
    providers = _assign_providers(units)
    kept = sorted(set(providers.values()))
    return Submission("units", target, units=[units[index] for index in kept],
                      providers={name: kept.index(index) for name, index in providers.items()},
                      problems=problems)
