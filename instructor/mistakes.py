"""The notebooks' "Common mistakes" sections, written from the autograder's own diagnoses.

Every check in `autograder/trusted/checks/*.py` names the wrong answers it recognizes,
`Mistake(label, fix, answer)`, and explains the failures it reports, `Fail("...")`. This module
reads both from the checks' source (nothing runs) and rewrites the markdown cell tagged
`common-mistakes` in each notebook of `solutions/`, keeping the cell's heading line:

- a notebook that defines graded functions lists, for each, the mistakes and failures of its checks;
- a notebook that defines none (the end-to-end stage) lists every stage's mistakes, one line each,
  as a checklist for a run that does not learn.

`python -m instructor.release` runs this before it generates the release, so one command brings both
up to date after the checks change; `python -m instructor.mistakes --check` only reports stale
cells.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course import GRADED_FUNCTIONS, STAGES
from course.cli import Parser
from course.paths import ROOT, SOLUTIONS

CHECKS_DIR = ROOT / "autograder" / "trusted" / "checks"
TAG = "common-mistakes"
HOLE = "…"  # what a formatted value {x} of a message becomes
MIN_WORDS = 4  # a Fail message with fewer literal words is a wrapper, not a diagnosis


@dataclass
class Diagnoses:
    """What the checks of one graded function say: (label, fix) pairs and failure messages."""

    mistakes: list[tuple[str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # the check modules they come from


def render(node: ast.expr) -> str | None:
    """The text of a string expression, with every formatted value as HOLE; None if not a string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else HOLE
                       for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = render(node.left), render(node.right)
        if left is None and right is None:
            return None
        return (left or HOLE) + (right or HOLE)
    return None


def _tidy(message: str) -> str:
    message = re.sub(rf"(\s*{HOLE})+", f" {HOLE}", message).strip()
    message = re.sub(rf"[,:;]? (got|is) {HOLE}(: {HOLE})?$", "", message)  # ", got …": the value
    return message.rstrip(" ,:;")


def _called_names(function: ast.AST) -> set[str]:
    return {node.func.id for node in ast.walk(function)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def _check_target(function: ast.FunctionDef, constants: dict[str, str]) -> str | None:
    """The graded function a `@check(FN, ...)`-decorated function checks, or None."""
    for decorator in function.decorator_list:
        if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name)
                and decorator.func.id == "check" and decorator.args):
            first = decorator.args[0]
            if isinstance(first, ast.Name):
                return constants.get(first.id)
            return render(first)
    return None


def _collect_module(path: Path, found: dict[str, Diagnoses]) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {node.targets[0].id: node.value.value for node in tree.body
                 if isinstance(node, ast.Assign) and len(node.targets) == 1
                 and isinstance(node.targets[0], ast.Name)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    for function in functions.values():
        target = _check_target(function, constants)
        if target is None:
            continue
        # the check's body, and the module's helpers it calls (transitively), in source order
        reached, frontier = {function.name}, [function]
        while frontier:
            for name in _called_names(frontier.pop()) & functions.keys() - reached:
                reached.add(name)
                frontier.append(functions[name])
        entry = found.setdefault(target, Diagnoses())
        # as the repository names it, wherever read from
        shown = f"autograder/trusted/checks/{path.name}"
        if shown not in entry.sources:
            entry.sources.append(shown)
        for name in sorted(reached, key=lambda n: functions[n].lineno):
            _collect_calls(functions[name], entry)


def _collect_calls(function: ast.FunctionDef, entry: Diagnoses) -> None:
    calls = sorted((node for node in ast.walk(function) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name) and node.func.id in ("Mistake", "Fail")),
                   key=lambda node: (node.lineno, node.col_offset))
    for call in calls:
        texts = [render(arg) for arg in call.args[:2]]
        if call.func.id == "Mistake" and len(texts) == 2 and None not in texts:
            pair = (_tidy(texts[0]), _tidy(texts[1]))
            if pair not in entry.mistakes:
                entry.mistakes.append(pair)
        elif call.func.id == "Fail" and texts and texts[0] is not None:
            message = _tidy(texts[0])
            if len(re.findall(r"[A-Za-z]{2,}",
                              message)) >= MIN_WORDS and message not in entry.failures:
                entry.failures.append(message)


def collect_diagnoses(checks_dir: Path = CHECKS_DIR) -> dict[str, Diagnoses]:
    """Graded function name -> what its checks diagnose, read from the check modules' source."""
    paths = sorted(p for p in Path(checks_dir).glob("*.py") if p.name != "__init__.py")
    if not paths:
        raise ValueError(f"checks_dir={checks_dir} holds no check modules")
    found: dict[str, Diagnoses] = {}
    for path in paths:
        _collect_module(path, found)
    return found


def _markdown(text: str) -> str:
    """Message text as markdown text: no math, no HTML, no emphasis."""
    return (text.replace("\\", "\\\\").replace("$", "\\$").replace("*", "\\*")
            .replace("<", "&lt;").replace(">", "&gt;"))


def graded_functions(notebook: nbformat.NotebookNode) -> list[str]:
    """The graded functions a notebook's solution cells define, in order."""
    names = []
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            names += [n for n in re.findall(r"^def (\w+)\(", cell.source, re.M)
                      if n in GRADED_FUNCTIONS]
    return names


def section(heading: str, functions: list[str], diagnoses: dict[str, Diagnoses]) -> str:
    """The markdown of one notebook's common-mistakes cell."""
    sources = sorted(
        {
            s
            for name in (functions or GRADED_FUNCTIONS)
            for s in diagnoses.get(name, Diagnoses()).sources
        }
    )
    lines = [heading, "",
             f"*Generated by `python -m instructor.release` from the autograder's checks "
             f"({', '.join(f'`{s}`' for s in sources)}); do not edit by hand.*", ""]
    if functions:
        lines += ["The wrong answers the autograder recognizes for this stage, each with its fix. "
                  "When your "
                  "output matches one, the check says so by name.", ""]
        for name in functions:
            entry = diagnoses.get(name, Diagnoses())
            lines += [f"**`{name}`**", ""]
            lines += [f"- *{_markdown(label)}*. Fix: {_markdown(fix)}."
                      for label, fix in entry.mistakes]
            if entry.failures:
                lines += ["", "Other failures it explains:", ""]
                lines += [f"- {_markdown(message)}" for message in entry.failures]
            lines.append("")
    else:
        lines += ["This stage has no graded function. A run that does not learn usually hides one "
                  "of the "
                  "mistakes the earlier stages' checks recognize; here they are, stage by "
                  "stage.", ""]
        for stage, names in STAGES.items():
            for name in names:
                labels = [_markdown(label) for label, _ in diagnoses.get(name,
                                                                         Diagnoses()).mistakes]
                if labels:
                    lines.append(f"- Stage {stage.split('_')[0]}, `{name}`: {'; '.join(labels)}.")
    return "\n".join(lines).rstrip() + "\n"


def updated_notebook(path: Path, diagnoses: dict[str, Diagnoses]) -> nbformat.NotebookNode | None:
    """The notebook with its common-mistakes cell rewritten, or None if it is already current."""
    notebook = nbformat.read(path, as_version=4)
    cells = [c for c in notebook.cells if TAG in c.metadata.get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{path.name} must have exactly one markdown cell tagged {TAG!r}, has "
                         f"{len(cells)}")
    heading = cells[0].source.split("\n", 1)[0]
    text = section(heading, graded_functions(notebook), diagnoses).rstrip("\n")
    if cells[0].source == text:
        return None
    cells[0].source = text
    return notebook


def stale_notebooks(solutions_dir: Path, checks_dir: Path = CHECKS_DIR) -> list[str]:
    """Names of solution notebooks whose common-mistakes cell is out of date."""
    diagnoses = collect_diagnoses(checks_dir)
    return [
        p.name
        for p in sorted(Path(solutions_dir).glob("*.ipynb"))
        if updated_notebook(p, diagnoses)
    ]


def write_sections(solutions_dir: Path, checks_dir: Path = CHECKS_DIR) -> list[Path]:
    """Rewrite every stale common-mistakes cell in `solutions_dir`; return the notebooks written."""
    diagnoses = collect_diagnoses(checks_dir)
    written = []
    for path in sorted(Path(solutions_dir).glob("*.ipynb")):
        notebook = updated_notebook(path, diagnoses)
        if notebook is not None:
            nbformat.write(notebook, path)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m instructor.mistakes", description=__doc__.splitlines()[0])
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS)
    parser.add_argument("--check", action="store_true", help="only report stale cells; write "
                                                             "nothing")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_notebooks(args.solutions)
        for name in stale:
            print(f"out of date: {args.solutions / name} (its common-mistakes cell)")
        return 1 if stale else 0
    for path in write_sections(args.solutions):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
