"""Every parse on the grading path goes through `course.submissions.parsing.parse`, the one lock.

CPython 3.11 (Debian 12's 3.11.2 among them) keeps the AST constructor's recursion depth in
interpreter-wide state: two threads in `ast.parse` at once can raise `SystemError: AST constructor
recursion depth mismatch`. The grader parses in threads (the tests grade submissions in a thread pool;
a class job starts its next sandbox in a thread), so one raw `ast.parse` beside the lock is enough to
fail a grading at random on such a Python. The race needs a thread
switch inside the C converter, which a test cannot force, so the rule is held by reading the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRADING_PATH = ("autograder", "course/submissions")
RAW = {"parse", "literal_eval"}  # ast.literal_eval parses too


def raw_parses(source: str) -> list[int]:
    """Line numbers of `ast.parse(...)` / `ast.literal_eval(...)` calls in `source`."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in RAW and isinstance(node.func.value, ast.Name) and node.func.value.id == "ast"]


def test_the_grading_path_parses_only_under_the_lock():
    found = []
    for folder in GRADING_PATH:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "parsing.py":
                continue
            found += [f"{path.relative_to(ROOT)}:{line}" for line in raw_parses(path.read_text(encoding="utf-8"))]
    assert not found, f"ast.parse outside course.submissions.parsing: {found}"


def test_the_scan_finds_a_raw_parse():
    assert raw_parses("import ast\ntree = ast.parse(text)\nast.literal_eval('1')\n") == [2, 3]
    assert raw_parses("from course.submissions.parsing import parse\ntree = parse(text)\n") == []

