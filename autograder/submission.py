"""Reading a submission without running it: a folder of notebooks, one notebook, a .py, or a module.

Notebooks are read, not run. From each code cell we keep the statements that define things —
imports, `def`, `class`, and assignments to UPPER_CASE constants (2+ characters, so that `N = ...`
stays exploration) — and drop everything else
(exploration, plots, training loops, self-check calls), so a cell that trains for an hour or calls
`os._exit` at top level never runs. IPython magics (`%...`, `!...`) are dropped before parsing.
When several notebooks are given, a graded name defined with `def` wins over one merely imported.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

from autograder.reference import GRADED_FUNCTIONS

KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass
class Submission:
    """What the worker should load. kind: "module" (importable name), "py" (file) or "units"."""

    kind: str
    target: str
    units: list = field(default_factory=list)  # [{"name", "statements": [(label, source)]}]
    providers: dict = field(default_factory=dict)  # graded name -> unit index
    problems: list = field(default_factory=list)  # syntax errors etc., reported with each check

    @property
    def is_reference(self) -> bool:
        return self.kind == "module" and self.target == "course"

    def to_request(self) -> dict:
        return {"kind": self.kind, "target": self.target, "units": self.units,
                "providers": self.providers}


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


def read_notebook(path: Path) -> tuple[dict, list]:
    """One notebook → a unit of kept statements, plus any problems found (syntax errors)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    statements, problems, defined, imported = [], [], set(), set()
    code_cells = [c for c in notebook.get("cells", []) if c.get("cell_type") == "code"]
    for number, cell in enumerate(code_cells, start=1):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        label = f"{path.name}, code cell {number}"
        try:
            tree = ast.parse(_strip_magics(source), filename=label)
        except SyntaxError as exc:
            problems.append(f"{label}: SyntaxError: {exc.msg} (line {exc.lineno}); "
                            "the definitions in this cell were not graded")
            continue
        for node in tree.body:
            if isinstance(node, KEPT) or _is_constant_assignment(node):
                statements.append((f"{label}, line {node.lineno}", ast.unparse(node)))
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    defined.add(node.name)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    imported.update((a.asname or a.name).split(".")[0] for a in node.names)
    unit = {"name": path.name, "statements": statements, "defined": sorted(defined),
            "imported": sorted(imported)}
    return unit, problems


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
    looks_like_module = "/" not in str(spec) and path.suffix == "" and str(spec).replace(".", "").replace("_", "").isalnum()
    if looks_like_module and not (root / path).is_dir() or (root / path / "__init__.py").exists():
        return Submission("module", str(spec))
    if not path.is_absolute() and not path.exists() and (root / path).exists():
        path = root / path
    if path.is_dir():
        notebooks = sorted(path.glob("*.ipynb"))
        if not notebooks:
            py_files = sorted(path.glob("*.py"))
            if len(py_files) == 1:
                return Submission("py", str(py_files[0].resolve()))
            return Submission("units", str(path), problems=[f"no notebooks found in {path}"])
        return _from_notebooks(notebooks, str(path))
    if path.suffix == ".ipynb" and path.exists():
        return _from_notebooks([path], str(path))
    if path.suffix == ".py" and path.exists():
        return Submission("py", str(path.resolve()))
    if looks_like_module:
        return Submission("module", str(spec))
    return Submission("units", str(spec), problems=[f"submission {spec} not found"])


def _from_notebooks(paths: list, target: str) -> Submission:
    units, problems = [], []
    for path in paths:
        try:
            unit, found = read_notebook(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name}: could not be read as a notebook ({exc})")
            continue
        units.append(unit)
        problems.extend(found)
    return Submission("units", target, units=units, providers=_assign_providers(units),
                      problems=problems)
