"""A .py submission's helpers: the files beside it that its own import statements name.

One rule for both sides: the worker's helper finder serves exactly these files
(`autograder.untrusted.worker.HelperFinder`), and the authorship rule reads exactly these
(`autograder.trusted.grader`), so no file runs that was not read. A helper never takes the name
of a module of the standard library (`sys.stdlib_module_names`: Python imports some of them on
its own, `stringprep` for `"x".encode("idna")`), of an installed package, or of the course and
its grader: such an import finds the real module.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import sys

from course.submissions.parsing import parse

OURS = {"course", "autograder", "instructor", "tests", "benchmarks"}
MAX_HELPERS = 50


def _library_paths() -> list[str]:
    roots = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    return [p for p in sys.path if p and os.path.isabs(p) and p.startswith(roots)]


def is_library(name: str) -> bool:
    """Whether `name` is a module Python would find without the submission's folder."""
    if name in sys.stdlib_module_names or name in sys.builtin_module_names or name in OURS:
        return True
    try:
        return importlib.machinery.PathFinder.find_spec(name, _library_paths()) is not None
    except (ImportError, ValueError, OSError):
        return True  # cannot tell: do not serve it


def imported_names(text: str) -> list[str]:
    """The top-level module names that `text`'s absolute imports name, in order."""
    try:
        tree = parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".")[0])
    return list(dict.fromkeys(names))


def servable(files: dict[str, str], main: str) -> dict[str, str]:
    """{file name: text} of the helpers of `main` (a file name of `files`): the files of `files`
    that its imports name, and theirs, transitively; never a library module's name."""
    served, todo = {}, [files[main]] if main in files else []
    while todo and len(served) < MAX_HELPERS:
        for name in imported_names(todo.pop(0)):
            file = f"{name}.py"
            if file in files and file != main and file not in served and not is_library(name):
                served[file] = files[file]
                todo.append(files[file])
    return served
