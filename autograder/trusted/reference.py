"""The trusted reference: `course`'s graded functions, looked up by name.

The parent computes expected values with it. The sandboxed worker never gets the reference of the
stage it grades (`course_sources` stubs it out), and a pasted copy is caught from the submission's
source (`copied_references`). Notebook self-checks, which run in the student's own kernel, count
calls into the reference instead (`counting_calls`): fine for practice, not a defence.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib
import json
import pkgutil
from collections import Counter
from pathlib import Path

from autograder.trusted.parsing import parse
from course.registry import GRADED_FUNCTIONS, HOME_MODULES, STAGE_MODULES, STAGES


def reference(name: str):
    """The reference implementation of graded function `name`."""
    return getattr(importlib.import_module(HOME_MODULES[name]), name)


def import_course_modules() -> list:
    import course
    modules = [course]
    for info in pkgutil.iter_modules(course.__path__, "course."):
        if info.name in set(HOME_MODULES.values()):
            modules.append(importlib.import_module(info.name))
    return modules


def reference_wrappers(counter: Counter) -> dict:
    """{reference function: counting wrapper}, one per graded function."""
    wrappers = {}
    for name in GRADED_FUNCTIONS:
        ref = reference(name)

        def wrapper(*args, __name=name, __ref=ref, **kwargs):
            counter[__name] += 1
            return __ref(*args, **kwargs)

        wrappers[ref] = functools.update_wrapper(wrapper, ref)
        wrapper.__grader_reference__ = name
    return wrappers


def install_counters(wrappers: dict, namespaces=()) -> list:
    """Replace every binding of a reference function in `course` modules (and `namespaces`)."""
    replaced = []
    targets = [vars(m) for m in import_course_modules()] + list(namespaces)
    for namespace in targets:
        for key, value in list(namespace.items()):
            try:
                wrapper = wrappers.get(value)
            except TypeError:  # unhashable value
                continue
            if wrapper is not None:
                namespace[key] = wrapper
                replaced.append((namespace, key, value))
    return replaced


@contextlib.contextmanager
def counting_calls(counter: Counter, namespaces=()):
    """Count reference calls while the block runs, then restore every binding (in-process mode)."""
    replaced = install_counters(reference_wrappers(counter), namespaces)
    try:
        yield
    finally:
        for namespace, key, value in replaced:
            namespace[key] = value


def is_reference(function, name: str) -> bool:
    ref = reference(name)
    seen = function
    for _ in range(5):  # follow functools.wraps chains
        if seen is ref or getattr(seen, "__grader_reference__", None) == name:
            return True
        seen = getattr(seen, "__wrapped__", None)
        if seen is None:
            return False
    return False


# ---- the reference where a function is graded: absent ------------------------------------
# The sandboxed worker never sees `course/` on disk: the grader sends it the source of each
# `course` module, and for the stage under test (and every later stage) each function of the
# stage's modules is replaced by a stub that raises. So the reference of a graded function does not
# exist in the process that grades it: a wrapper, `__wrapped__`, `importlib.reload`, or `exec` of
# `inspect.getsource` all find the stub. Earlier stages' references stay whole (a student's train
# step may use the reference tokenizer). A pasted copy is caught on this side, from the source.
COURSE_DIR = Path(__file__).resolve().parents[2] / "course"
STAGE_NUMBER = {stage: number for number, stage in enumerate(STAGES, start=1)}
MODULE_STAGE = {module: STAGE_NUMBER[stage] for module, stage in STAGE_MODULES.items()}
STUB = ("def {name}(*args, **kwargs):\n"
        "    __reference_called__({name!r})\n"
        "{name}.__grader_stub__ = {name!r}\n")


def _stubbed(source: str, keep: tuple[str, ...] = ()) -> str:
    """`source` with every function of the module (and every method of its private classes)
    replaced by a stub, except `keep` and helpers that its classes or module-level code use."""
    tree = parse(source)
    kept = set(keep) | {node.id for statement in tree.body if not isinstance(statement, ast.FunctionDef)
            for node in ast.walk(statement) if isinstance(node, ast.Name)}
    body = []
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef) and statement.name not in kept:
            body.extend(parse(STUB.format(name=statement.name)).body)
            continue
        if isinstance(statement, ast.ClassDef) and statement.name.startswith("_"):
            for index, item in enumerate(statement.body):
                if isinstance(item, ast.FunctionDef):
                    item.body = parse(f"__reference_called__({statement.name!r})").body
                    statement.body[index] = item
        body.append(statement)
    tree.body = body
    return ast.unparse(tree)


def course_sources(stage: str | None) -> dict[str, str]:
    """{module name: source} of `course`; graded modules of `stage` and later stages stubbed
    (stage None: the whole reference, for grading `course` itself)."""
    sources = {}
    for path in sorted(COURSE_DIR.glob("*.py")):
        name = "course" if path.stem == "__init__" else f"course.{path.stem}"
        source = path.read_text(encoding="utf-8")
        if stage is not None and MODULE_STAGE.get(name, 0) >= STAGE_NUMBER[stage]:
            source = _stubbed(source)
        sources[name] = source
    return sources


class _Canonical(ast.NodeTransformer):
    """Local names become v0, v1, ... in order of appearance; docstrings, annotations and the
    text of strings go."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _local(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_arg(self, node):
        node.arg, node.annotation = self._local(node.arg), None
        return node

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Store) or node.id in self.names:
            node.id = self._local(node.id)
        return node

    def visit_Constant(self, node):
        if isinstance(node.value, str):  # messages reworded do not make a copy one's own
            node.value = ""
        return node

    def visit_JoinedStr(self, node):
        return ast.Constant("")

    def visit_FunctionDef(self, node):
        node.returns, node.decorator_list = None, []
        if node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            node.body = node.body[1:] or [ast.Pass()]
        self.generic_visit(node)
        node.name = "f"
        return node


def fingerprint(function: ast.FunctionDef) -> str:
    """The shape of a function's code with its local names, strings, docstring and annotations
    erased: equal for a pasted (renamed, reworded) copy, different for code written independently."""
    import copy

    return ast.dump(_Canonical().visit(copy.deepcopy(function)), annotate_fields=False)


def _definitions(source: str) -> list[ast.FunctionDef]:
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]


def reference_fingerprints() -> dict[str, str]:
    """{graded function: fingerprint of its reference}."""
    prints = {}
    for name, module in HOME_MODULES.items():
        source = (COURSE_DIR / f"{module.split('.')[1]}.py").read_text(encoding="utf-8")
        prints[name] = next(fingerprint(d) for d in _definitions(source) if d.name == name)
    return prints


# A student edition holds no reference of its unrevealed stages, only this: {"salt", "functions":
# {graded function: salted SHA-256 of its reference's fingerprint}} (`course.edition` writes it).
STORED_FINGERPRINTS = COURSE_DIR.parent / "autograder" / "fixtures" / "fingerprints.json"


def salted(print_: str, salt: str) -> str:
    return hashlib.sha256((salt + print_).encode()).hexdigest()


def _salted_reference_fingerprints() -> tuple[str, dict[str, str]]:
    """(salt, {graded function: salted fingerprint}): stored in a student edition, else computed."""
    if STORED_FINGERPRINTS.exists():
        stored = json.loads(STORED_FINGERPRINTS.read_text(encoding="utf-8"))
        return stored["salt"], stored["functions"]
    return "", {name: salted(value, "") for name, value in reference_fingerprints().items()}


def copied_references(sources: list[str]) -> set[str]:
    """The graded functions whose reference appears, pasted, among the definitions in `sources`."""
    salt, prints = _salted_reference_fingerprints()
    wanted = {value: name for name, value in prints.items()}
    found = set()
    for source in sources:
        for definition in _definitions(source):
            name = wanted.get(salted(fingerprint(definition), salt))
            if name is not None:
                found.add(name)
    return found
