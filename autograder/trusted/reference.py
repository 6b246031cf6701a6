"""The trusted reference: `course`'s graded functions, looked up by name.

The parent computes expected values with it. The sandboxed worker never gets the reference of the
stage it grades (`course_sources` stubs it out), and a pasted copy is found in the submission's
source (`authorship`, below): flagged with its evidence, zeroed only under `--copies zero` above a
threshold calibrated on honest work. Notebook self-checks, which run in the student's own kernel,
count calls into the reference instead (`counting_calls`): fine for practice, not a defence.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import json
import pkgutil
from collections import Counter
from dataclasses import dataclass, replace

from autograder.protocol.markers import GIVEN_HEAD, GIVEN_HEAD_EVENT
from autograder.trusted.similarity import containment, fingerprints, kgram_lines, kgrams, tokens
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
    kept = set(keep) | {node.id for statement in tree.body if not isinstance(statement,
                                                                             ast.FunctionDef)
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
# computation, so each function and method of the helper raises the audit event GIVEN_HEAD_EVENT
# when called, which the stage child's hook counts where the submission cannot write
# (`autograder.untrusted.provenance`; the probes read it around a plain-path call). `sys.audit` is
# bound as a keyword-only default as the module is first imported, before the submission loads:
# the child refuses a rebound default and a second run of the module's code.
AUDIT = "grader_audit_"


def _counted(source: str) -> str:
    tree = parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.args.kwonlyargs.append(ast.arg(AUDIT))
            node.args.kw_defaults.append(parse('__import__("sys").audit').body[0].value)
            node.body[:0] = parse(f"{AUDIT}({GIVEN_HEAD_EVENT!r})").body
    return ast.unparse(tree)


def course_sources(stage: str | None) -> dict[str, str]:
    """{module name: source} of `course`; graded modules of `stage` and later stages stubbed
    (stage None: the whole reference, for grading `course` itself)."""
    sources = {}
    for path in sorted(COURSE_DIR.rglob("*.py")):
        parts = ("course", *path.relative_to(COURSE_DIR).with_suffix("").parts)
        # a sub-package: its __init__
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        source = path.read_text(encoding="utf-8")
        if stage is not None and MODULE_STAGE.get(name, 0) >= STAGE_NUMBER[stage]:
            source = stubbed(source)
        sources[name] = _counted(source) if name == GIVEN_HEAD else source
    return sources


# ---- copies: the reference in another form ---------------------------------------------------
# The rule, for a student's grade (`--allow-reference` lifts it for an instructor's check):
#  1. code built at run time is not read here: the stage child sees it happen, and grades nothing
#     that runs code the grader did not read (`autograder.untrusted.provenance`);
#  2. similarity to the reference is evidence for a person, not a score (MOSS, JPlag and
#     Gradescope's similarity report work so). A definition that, with the functions of the
#     submission it calls, holds more of a graded function's reference fingerprints
#     (`autograder.trusted.similarity`: winnowed canonical AST k-grams, so renaming, dead code and
#     reordered statements do not hide it) than any honest implementation of the corpus, and at
#     least FLAG_AT, is flagged with the evidence (`Evidence`); it costs no points unless the
#     instructor asks for `--copies zero`, and then only at or above the function's THRESHOLDS.
# HONEST_MAX: the largest share of each reference that an honest implementation holds, measured
# over the corpus of independent implementations in tests/corpus.py
# (`benchmarks/bench_similarity.py`,
# benchmarks/README.md; tests/test_copies.py fails when it changes). A function's threshold is
# FLOOR, or HONEST_MAX + MARGIN where that is higher; where that passes 1.0 no share separates a
# copy
# from honest work (the natural tokenizer holds all of the reference's fingerprints: the task all
# but dictates it), and the function is flagged at most, never zeroed.
COPIES = ("flag", "zero")
FLAG_AT = 0.6
FLOOR = 0.8
MARGIN = 0.1
HONEST_MAX = {  # rounded up to the percent
    "tokenize_prompt_and_output": 1.0, "compute_entropy": 0.27, "get_response_log_probs": 0.49,
    "compute_rollout_rewards": 0.39, "compute_group_normalized_rewards": 0.24,
    "compute_policy_gradient_loss": 0.4, "estimate_kl": 0.23, "truncated_importance_weights": 0.23,
    "compute_grpo_loss": 0.41, "aggregate_loss_across_microbatch": 0.35, "grpo_train_step": 0.92,
}


def penalty_threshold(honest_max: float) -> float | None:
    """The share at or above which `--copies zero` zeroes a function whose most similar honest
    implementation holds `honest_max` (None: never)."""
    threshold = round(max(FLOOR, honest_max + MARGIN), 2)
    return threshold if threshold <= 1.0 else None


THRESHOLDS = {name: penalty_threshold(share) for name, share in HONEST_MAX.items()}
SIDE = 46  # characters of one side of the evidence's lines
MAX_EVIDENCE_LINES = 12


@dataclass(frozen=True)
class Evidence:
    """Why a graded function is flagged as similar to its reference: the share of the reference's
    fingerprints that `holder` (a definition of the submission, with the functions it calls)
    holds, the corpus's most similar honest share, and the matched lines side by side
    [(reference line, submission line)] (the submission's alone in a student edition, which holds
    no reference text)."""

    function: str
    share: float
    holder: str
    honest_max: float
    threshold: float | None
    lines: tuple[tuple[str, str], ...] = ()

    @property
    def penalized(self) -> bool:
        """Whether `--copies zero` zeroes the function."""
        return self.threshold is not None and self.share >= self.threshold

    def summary(self) -> str:
        limit = (f"--copies zero zeroes it at {self.threshold:.0%}" if self.threshold is not None
                 else "no share separates a copy from honest work here: never zeroed")
        return (f"{self.function}: `{self.holder}` holds {self.share:.0%} of the reference's "
                f"fingerprints; the most similar honest implementation in the corpus holds "
                f"{self.honest_max:.0%} ({limit})")

    def text(self) -> str:
        rows = [f"    {left:<{SIDE}} | {right}" for left, right in self.lines]
        header = f"    {'reference course.' + self.function:<{SIDE}} | submission `{self.holder}`"
        return "\n".join([self.summary(), header, *rows])

    def penalty(self) -> str:
        """The reason a student reads when `--copies zero` zeroes the function."""
        return (f"{self.function} is a copy of the reference `course.{self.function}` "
                f"(--copies zero): `{self.holder}` holds {self.share:.0%} of its fingerprints, at "
                f"or above this function's threshold of {self.threshold:.0%} (the most similar "
                f"independent implementation measured holds {self.honest_max:.0%}; renaming, dead "
                "code or reordering do not change it): write your own implementation (calling the "
                "reference functions of earlier stages is fine)")


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


def _best_holders(definitions: list[ast.FunctionDef], salt: str,
                  prints: dict[str, set[str]]) -> dict[str, tuple[float, ast.FunctionDef | None]]:
    by_name = {d.name: d for d in definitions}
    best: dict[str, tuple[float, ast.FunctionDef | None]] = dict.fromkeys(prints, (0.0, None))
    for definition in definitions:
        held = set().union(*(kgrams(tokens(d), salt) for d in with_callees(definition, by_name)))
        for name, reference in prints.items():
            share = containment(reference, held)
            if share > best[name][0]:
                best[name] = (share, definition)
    return best


def reference_shares(definitions: list[ast.FunctionDef], salt: str = "",
                     prints: dict[str, set[str]] | None = None) -> dict[str, tuple[float, str]]:
    """{graded function: (the largest share of its reference's fingerprints that one of
    `definitions` holds with the functions it calls, that definition's name)}."""
    prints = prints if prints is not None else _stored_prints()[1]
    return {name: (share, holder.name if holder else "")
            for name, (share, holder) in _best_holders(definitions, salt, prints).items()}


def template_sources() -> dict[str, str]:
    """{module: source} for the sandbox's template, which builds the model and tokenizer once and
    imports the notebooks' plotting: `course.loop.models`, `course.loop.plotting` and the `course`
    modules they import at their top level, transitively, with an empty `course` package and the
    sub-packages that hold them. No graded module may be among them (the template's modules outlive
    it in every child), so one that is raises."""
    sources, wanted, todo = course_sources(None), set(), ["course.loop.models",
                                                          "course.loop.plotting"]
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


def _side(text: str) -> str:
    text = " ".join(text.split())  # one line of code, its indentation dropped
    width = SIDE - 6  # after the line number
    return text if len(text) <= width else text[:width - 3] + "..."


def _matched_lines(name: str, holder: ast.FunctionDef, by_name: dict, texts: dict[int, list[str]],
                   salt: str, prints: set[str]) -> tuple[tuple[str, str], ...]:
    """The reference's lines and the submission's that share a fingerprint, side by side, in the
    reference's order (`texts`: {id(definition): its source's lines})."""
    ours: dict[str, tuple[int, str]] = {}  # fingerprint -> (line, its text) in the submission
    for definition in with_callees(holder, by_name):
        lines = texts[id(definition)]
        for digest, found in kgram_lines(definition, salt).items():
            if digest in prints and digest not in ours:
                ours[digest] = (min(found), _side(lines[min(found) - 1]))
    theirs: dict[str, tuple[int, str]] = {}
    if not STORED_FINGERPRINTS.exists():  # a student edition holds no reference text
        source = (COURSE_DIR / f"{HOME_MODULES[name].split('.')[1]}.py").read_text(encoding="utf-8")
        lines = source.splitlines()
        definition = next(d for d in definitions_in(source)[1] if d.name == name)
        theirs = {digest: (min(found), _side(lines[min(found) - 1]))
                  for digest, found in kgram_lines(definition).items()}
    pairs = sorted({(theirs.get(digest, (0, "")), ours[digest]) for digest in ours})
    rows = tuple((f"{left[0]:>4}  {left[1]}" if left[0] else "", f"{right[0]:>4}  {right[1]}")
                 for left, right in pairs)
    if len(rows) > MAX_EVIDENCE_LINES:
        rows = rows[:MAX_EVIDENCE_LINES] + (("", f"... and {len(rows) - MAX_EVIDENCE_LINES} more"),)
    return rows


def authorship(sources: list[str], copies: str = "flag") -> tuple[dict[str, str], dict[str,
                                                                                       Evidence]]:
    """({graded function: why it earns nothing}, {graded function: the evidence of its similarity
    to the reference} for each flagged one), read from `sources` (the submission's code, read,
    never run: its notebooks, or a .py and the helpers it imports). Under `copies="zero"`, each
    flagged one at or above its threshold earns nothing. A definition is read with the functions it
    calls from any of `sources`."""
    salt, prints = _stored_prints()
    refused: dict[str, str] = {}
    everything, texts = [], {}
    for source in sources:
        tree, definitions = definitions_in(source)
        if tree is None:
            continue
        lines = source.splitlines()
        everything += definitions
        texts.update({id(d): lines for d in definitions})
    by_name = {d.name: d for d in everything}
    evidence = {}
    for name, (share, holder) in _best_holders(everything, salt, prints).items():
        honest = HONEST_MAX.get(name, 0.0)
        if holder is None or share < FLAG_AT or share <= honest:
            continue
        evidence[name] = Evidence(name, share, holder.name, honest, THRESHOLDS.get(name),
                                  _matched_lines(name, holder, by_name, texts, salt,
                                                 prints[name]))
        if copies == "zero" and evidence[name].penalized:
            refused.setdefault(name, evidence[name].penalty())
    return refused, evidence


def captured_evidence(captured: list[tuple[str, str]]) -> dict[str, Evidence]:
    """{graded function: evidence} from the text a stage child saw compiled at run time (refused,
    or written by the library as the submission's line asked: `autograder.untrusted.provenance`),
    read like a submission's files: a flag for the instructor, never a zero (it did not run)."""
    texts = [text for origin, text in captured if not origin.startswith("the helper module")]
    found = authorship(texts)[1] if texts else {}
    return {name: replace(evidence, threshold=None,
                          holder=f"{evidence.holder}, in text compiled at run time")
            for name, evidence in found.items()}


def copied_references(sources: list[str], copies: str = "flag") -> dict[str, str]:
    """{graded function: why it earns nothing} (`authorship`): under the default, similarity to
    the reference alone costs nothing."""
    return authorship(sources, copies)[0]
