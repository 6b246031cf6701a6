"""Every function of the product (course/, autograder/, instructor/) reads on one screen: at most
80 lines from its `def` to its last line, docstring included, measured with ast."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("course", "autograder", "instructor")
MAX_LINES = 80


def long_functions(source: str, name: str) -> list[str]:
    """'name:function (lines)' for each function (methods and nested ones too) over MAX_LINES."""
    return [f"{name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_LINES]


def test_no_function_is_over_80_lines():
    found = [entry for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
             for entry in long_functions(path.read_text(encoding="utf-8"),
                                         path.relative_to(ROOT).as_posix())]
    assert found == []


def test_the_measure_sees_a_long_function_and_a_long_method():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))
    assert long_functions(f"def fits():\n{body}", "m") == []  # exactly 80 lines
    longer = f"def f():\n{body}    x = 0\n"
    assert long_functions(longer, "m") == [f"m:f ({MAX_LINES + 1} lines)"]
    method = "class C:\n" + "".join("    " + line + "\n" for line in longer.splitlines())
    assert long_functions(method, "m") == [f"m:f ({MAX_LINES + 1} lines)"]
