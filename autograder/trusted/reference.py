"""The trusted reference: `course`'s graded functions, looked up by name.

The parent computes expected values with it. The sandboxed worker never gets the reference of the
stage it grades (`course_sources` stubs it out), and a pasted copy is caught from the submission's
source (`copied_references`: the copy rule, below, with its measured threshold). Notebook self-checks, which run in the student's own kernel, count
calls into the reference instead (`counting_calls`): fine for practice, not a defence.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import json
import pkgutil
from collections import Counter

from autograder.trusted.dynamic import dynamic_code
from autograder.trusted.similarity import containment, fingerprints, kgrams, tokens
from course.paths import ROOT
from course.registry import GRADED_FUNCTIONS, HOME_MODULES, STAGE_MODULES, STAGES
from course.submissions.parsing import parse


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
COURSE_DIR = ROOT / "course"
STAGE_NUMBER = {stage: number for number, stage in enumerate(STAGES, start=1)}
MODULE_STAGE = {module: STAGE_NUMBER[stage] for module, stage in STAGE_MODULES.items()}
STUB = ("def {name}(*args, **kwargs):\n"
        "    __reference_called__({name!r})\n"
        "{name}.__grader_stub__ = {name!r}\n")


def stubbed(source: str, keep: tuple[str, ...] = ()) -> str:
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


# Stage 2's given helper: its plain path (`logits_chunk_size=0`) must be the student's own
# computation, so each function and method of the helper counts its calls in the module's
# `__grader_calls__`, which the probes read around a plain-path call (`probes.GIVEN_HEAD`).
GIVEN_HEAD = "course.chunked_head"
COUNTER = "__grader_calls__"


def _counted(source: str) -> str:
    tree = parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body[:0] = parse(f"{COUNTER}[0] += 1").body
    after = max((i + 1 for i, n in enumerate(tree.body)
                 if isinstance(n, ast.ImportFrom) and n.module == "__future__"), default=0)
    tree.body[after:after] = parse(f"{COUNTER} = [0]").body
    return ast.unparse(tree)


def course_sources(stage: str | None) -> dict[str, str]:
    """{module name: source} of `course`; graded modules of `stage` and later stages stubbed
    (stage None: the whole reference, for grading `course` itself)."""
    sources = {}
    for path in sorted(COURSE_DIR.rglob("*.py")):
        parts = ("course", *path.relative_to(COURSE_DIR).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)  # a sub-package: its __init__
        source = path.read_text(encoding="utf-8")
        if stage is not None and MODULE_STAGE.get(name, 0) >= STAGE_NUMBER[stage]:
            source = stubbed(source)
        sources[name] = _counted(source) if name == GIVEN_HEAD else source
    return sources


# ---- copies: the reference in another form ---------------------------------------------------
# The rule, for a student's grade (`--allow-reference` lifts it for an instructor's check):
#  1. dynamic code anywhere in the submission (`autograder.trusted.dynamic`: exec, eval, compile,
#     unpacking, reflection): none of its graded functions is graded, since the code that runs is
#     not the code that was read;
#  2. a definition that, with the functions of the submission it calls, holds at least
#     COPY_THRESHOLD of a graded function's reference fingerprints (`autograder.trusted.similarity`:
#     winnowed canonical AST k-grams, so renaming, dead code and reordered statements do not hide
#     it) makes that graded function a copy: 0 for it.
# Measured (`benchmarks/bench_similarity.py`, benchmarks/README.md): honest independent
# implementations in five styles and the release notebooks' given code hold at most 0.58 of any
# reference (the tests' naive tokenizer, whose loop the task all but dictates; every other honest
# share is under 0.40); mechanical near-copies (dead code after every statement, renamed,
# reordered, all three) hold at least 0.96. 0.80 leaves 0.22 above the most similar honest work
# and 0.16 below the least similar copy: a false flag costs a student points, a missed copy less.
COPY_THRESHOLD = 0.8


def definitions_in(source: str) -> tuple[ast.Module | None, list[ast.FunctionDef]]:
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, []
    return tree, [node for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def reference_prints(salt: str = "") -> dict[str, list[str]]:
    """{graded function: its reference's winnowed fingerprints, salted, sorted}."""
    prints = {}
    for name, module in HOME_MODULES.items():
        source = (COURSE_DIR / f"{module.split('.')[1]}.py").read_text(encoding="utf-8")
        definition = next(d for d in definitions_in(source)[1] if d.name == name)
        prints[name] = sorted(fingerprints(definition, salt))
    return prints


# A student edition holds no reference of its unrevealed stages, only this: {"salt", "functions":
# {graded function: its reference's fingerprints, salted}} (`instructor.edition` writes it).
STORED_FINGERPRINTS = ROOT / "autograder" / "fixtures" / "fingerprints.json"


def _stored_prints() -> tuple[str, dict[str, set[str]]]:
    """(salt, {graded function: fingerprints}): stored in a student edition, else computed."""
    if STORED_FINGERPRINTS.exists():
        stored = json.loads(STORED_FINGERPRINTS.read_text(encoding="utf-8"))
        return stored["salt"], {name: set(v) for name, v in stored["functions"].items()}
    return "", {name: set(v) for name, v in reference_prints().items()}


def with_callees(definition: ast.FunctionDef, by_name: dict) -> list[ast.FunctionDef]:
    """`definition` and the submission's functions it calls by name, transitively."""
    seen, todo = {id(definition): definition}, [definition]
    while todo:
        for node in ast.walk(todo.pop()):
            callee = by_name.get(node.id) if isinstance(node, ast.Name) else None
            if callee is not None and id(callee) not in seen:
                seen[id(callee)] = callee
                todo.append(callee)
    return list(seen.values())


def _where(tree: ast.Module, line: int) -> str:
    enclosing = [node.name for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and node.lineno <= line <= (node.end_lineno or node.lineno)]
    return f"in `{enclosing[-1]}`" if enclosing else f"at top level (line {line})"


def _dynamic_reason(tree: ast.Module) -> str | None:
    found = dynamic_code(tree)
    if not found:
        return None
    named = "; ".join(f"{what} {_where(tree, line)}" for line, what in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (f"the submission builds or reaches code at run time ({named}{more}): the code that "
            "would run is not the code the grader read, so no graded function of it is graded; "
            "write plain Python")


def reference_shares(definitions: list[ast.FunctionDef], salt: str = "",
                     prints: dict[str, set[str]] | None = None) -> dict[str, tuple[float, str]]:
    """{graded function: (the largest share of its reference's fingerprints that one of
    `definitions` holds with the functions it calls, that definition's name)}."""
    prints = prints if prints is not None else _stored_prints()[1]
    by_name = {d.name: d for d in definitions}
    best = dict.fromkeys(prints, (0.0, ""))
    for definition in definitions:
        held = set().union(*(kgrams(tokens(d), salt) for d in with_callees(definition, by_name)))
        for name, reference in prints.items():
            share = containment(reference, held)
            if share > best[name][0]:
                best[name] = (share, definition.name)
    return best


def template_sources() -> dict[str, str]:
    """{module: source} for the sandbox's template, which builds the model and tokenizer once and
    imports the notebooks' plotting: `course.loop.models`, `course.loop.plotting` and the `course` modules
    they import at their top level, transitively, with an empty `course` package and the
    sub-packages that hold them. No graded module may be among them (the template's modules outlive
    it in every child), so one that is raises."""
    sources, wanted, todo = course_sources(None), set(), ["course.loop.models", "course.loop.plotting"]
    while todo:
        name = todo.pop()
        if name in wanted or name not in sources:
            continue
        wanted.add(name)
        for node in parse(sources[name]).body:  # top-level imports only: those run at import
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course."):
                todo.append(node.module)
            elif isinstance(node, ast.Import):
                todo.extend(a.name for a in node.names if a.name.startswith("course."))
        if name.count(".") > 1:  # a sub-package's module: the sub-package loads first
            todo.append(name.rsplit(".", 1)[0])
    graded = wanted & set(STAGE_MODULES)
    if graded:
        raise RuntimeError(f"the template's modules import graded modules {sorted(graded)}: the "
                           "sandbox's template would hold their reference")
    return {"course": "", **{name: sources[name] for name in sorted(wanted)}}


def copied_references(sources: list[str]) -> dict[str, str]:
    """{graded function: why it earns nothing} for each one that `sources` (the submission's code,
    read, never run: its notebooks, or a .py and the files it imports) holds a copy of, or could
    build at run time. A definition is read with the functions it calls from any of `sources`."""
    salt, prints = _stored_prints()
    found: dict[str, str] = {}
    everything = []
    for source in sources:
        tree, definitions = definitions_in(source)
        if tree is None:
            continue
        everything += definitions
        dynamic = _dynamic_reason(tree)
        if dynamic:
            for name in prints:
                found.setdefault(name, dynamic)
    for name, (share, holder) in reference_shares(everything, salt, prints).items():
        if share >= COPY_THRESHOLD and name not in found:
            found[name] = (f"{name} is a copy of the reference `course.{name}`: `{holder}` "
                           f"holds {share:.0%} of its fingerprints (independent work holds "
                           f"under {COPY_THRESHOLD:.0%}; renaming, dead code or reordering do "
                           "not change it): write your own implementation (calling the "
                           "reference functions of earlier stages is fine)")
    return found
