"""Similar work across a class: pairs of students whose graded functions are near-identical.

The same method as the similarity flag (`autograder.trusted.similarity`: canonical AST k-grams, so
renaming, reformatting, reworded messages, dead code and reordered statements do not hide a
shared function), applied between students instead of against the reference. For each graded
function a student defines, `graded_prints` keeps the k-gram hashes of the definition with the
functions of the submission it calls; two students are a pair when at least PAIR_FUNCTIONS of
their graded functions share PAIR_THRESHOLD of the smaller one's k-grams (`similarity.resemblance`).

A pair is a flag for the instructor to review (`instructor.batch` writes it in the CSV and a
report beside it), never a penalty: students may share a starting point the course gave them.
A graded function renamed and bound back by assignment (`def f1(...)` then
`tokenize_prompt_and_output = f1`, or imported under its name) is read as that graded function;
after a grading, so is the definition whose code the stage child judged for the name (its load
report's "judged": `judged_definitions`), however it was bound. A binding no reading follows
(`globals().update({k.removeprefix("_my_"): v ...})`, a dict subscript) hides no pair without
that report either: `definition_prints` keeps every definition of a student, its own k-grams
less the release's given code and templates (the base file of MOSS, which ignores code every
student was handed), and two students are also a pair when PAIR_FUNCTIONS definitions of one
each share PAIR_THRESHOLD with a different definition of the other, whatever their names
(`cross_matches`). Functions too short to tell apart (fewer than MIN_KGRAMS k-grams:
a release template's `raise NotImplementedError`, a one-line function) are left out.
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from itertools import combinations
from pathlib import Path

from autograder.trusted.similarity import kgrams, resemblance, tokens

# Measured (`benchmarks/bench_similarity.py`, over the honest corpus of tests/corpus.py): the most
# similar pair of honest independent implementations of one function shares 0.77 of its k-grams
# (two natural tokenizers, a function the task all but dictates); a disguised copy of a classmate
# (renamed against dead code + reordered + renamed) shares 1.00. 0.85 leaves 0.08 above the worst
# honest case; two functions, because one short function can coincide honestly.
PAIR_THRESHOLD = 0.85
PAIR_FUNCTIONS = 2
MIN_KGRAMS = 15


def _read(target: str) -> tuple[list[ast.FunctionDef], dict[str, str]]:
    """(every definition, `bound_names` of every text) of the submission at `target`, read as
    the grader reads it (never run)."""
    from autograder.trusted.grader import _sources
    from autograder.trusted.reference import definitions_in
    from course.paths import ROOT
    from course.submissions.reader import load_submission

    definitions, bindings = [], {}
    for source in _sources(load_submission(target, ROOT)):
        tree, found = definitions_in(source)
        definitions += found
        bindings.update(bound_names(tree) if tree is not None else {})
    return definitions, bindings


@functools.lru_cache(maxsize=1)
def release_kgrams() -> frozenset[str]:
    """The k-grams of every definition in the release notebooks (notebooks/: the given helpers
    and the templates every student starts from)."""
    from course.paths import ROOT

    return frozenset(h for d in _read(str(ROOT / "notebooks"))[0] for h in kgrams(tokens(d)))


def definition_prints(target: str) -> dict[str, list[str]]:
    """{"name, definition i": its own sorted k-gram hashes less `release_kgrams`} for every
    definition of the submission at `target` that keeps MIN_KGRAMS of them, whatever its name."""
    prints, base = {}, release_kgrams()
    for index, definition in enumerate(_read(target)[0]):
        held = sorted(set(kgrams(tokens(definition))) - base)
        if len(held) >= MIN_KGRAMS:
            prints[f"{definition.name}, definition {index + 1}"] = held
    return prints


def judged_definitions(target: str, judged: dict) -> dict[str, ast.FunctionDef]:
    """{graded function: the definition at the (file name, first line) that a stage child's load
    report names for it (`autograder.api.grade`'s "judged")}. The child compiles each notebook
    statement, and each file of a .py submission, under its own label, so a label and a line
    (a decorated function's first decorator) name one `def`; a package folder is left to names."""
    from autograder.protocol.helpers import servable
    from autograder.trusted.reference import definitions_in
    from course.paths import ROOT
    from course.submissions.reader import load_submission

    submission = load_submission(target, ROOT)
    if submission.kind == "units":
        texts = {label: text for unit in submission.units for label, text in unit["statements"]}
    elif submission.kind == "py":
        main = Path(submission.target).name
        texts = {main: submission.files[main], **servable(submission.files, main)}
    else:
        return {}
    found = {}
    for name, (label, line) in judged.items():
        text = texts.get(label if submission.kind == "units" else Path(label).name)
        for definition in definitions_in(text)[1] if text is not None else ():
            if min([definition.lineno] + [d.lineno for d in definition.decorator_list]) == line:
                found[name] = definition
    return found


def graded_prints(target: str, judged: dict | None = None) -> dict[str, list[str]]:
    """{graded function: sorted k-gram hashes of the submission's definition of it, with the
    functions it calls}, read (never run) from the submission at `target`: the definition the
    grader judged for it where `judged` (the grading's "judged") names one, else the one its
    name or a plain rebinding gives."""
    from autograder.trusted.reference import with_callees
    from course.registry import GRADED_FUNCTIONS

    definitions, bindings = _read(target)
    by_name = {d.name: d for d in definitions}
    for alias, name in bindings.items():  # `tokenize_prompt_and_output = f1`, followed along
        for _ in range(len(bindings)):  # a chain `a = b; b = f1`, never round a cycle
            if name in by_name or name not in bindings:
                break
            name = bindings[name]
        if name in by_name and alias in GRADED_FUNCTIONS:
            by_name[alias] = by_name[name]
    by_name.update(judged_definitions(target, judged) if judged else {})
    prints = {}
    for name in GRADED_FUNCTIONS:
        if name in by_name:
            held = sorted(set().union(*(kgrams(tokens(d))
                                        for d in with_callees(by_name[name], by_name))))
            if len(held) >= MIN_KGRAMS:
                prints[name] = held
    return prints


def bound_names(tree: ast.Module) -> dict[str, str]:
    """{name: the name it is bound to} for each plain rebinding in `tree`: `alias = name` (also
    in a tuple assignment or an annotated one) and `from helper import name as alias`. A graded
    function renamed and bound back by assignment is read as that graded function."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
            pairs += [pair for t in node.targets if isinstance(t, ast.Tuple)
                      and isinstance(node.value, ast.Tuple) and len(t.elts) == len(node.value.elts)
                      for pair in zip(t.elts, node.value.elts)]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = [(node.target, node.value)]
        elif isinstance(node, ast.ImportFrom):
            pairs = [(ast.Name(a.asname), ast.Name(a.name)) for a in node.names if a.asname]
        else:
            continue
        for target, value in pairs:
            if isinstance(target, ast.Name) and isinstance(value, ast.Name):
                bound[target.id] = value.id
    return bound


def cross_matches(a: dict[str, set[str]], b: dict[str, set[str]]) -> dict[str, float]:
    """{"a's definition ~ b's definition": resemblance} for the pairs at PAIR_THRESHOLD or more,
    each definition in one pair at most, the most similar first (greedy); names are ignored."""
    index: dict[str, list[str]] = {}
    for key, held in b.items():
        for h in held:
            index.setdefault(h, []).append(key)
    scored = []
    for key, held in a.items():  # only definitions sharing a k-gram are compared
        for other, count in Counter(k for h in held for k in index.get(h, ())).items():
            share = count / min(len(held), len(b[other]))
            if share >= PAIR_THRESHOLD:
                scored.append((share, key, other))
    matched, used = {}, set()
    for share, key, other in sorted(scored, reverse=True):
        if key not in used and other not in used:
            used.update((key, other))
            matched[f"{key.split(',')[0]} ~ {other.split(',')[0]}"] = round(share, 2)
    return matched


def similar_pairs(prints: dict[str, dict[str, list[str]]],
                  definitions: dict[str, dict[str, list[str]]] | None = None
                  ) -> list[tuple[str, str, dict]]:
    """[(student, student, {graded function: shared share})] for every pair of students with at
    least PAIR_FUNCTIONS graded functions over PAIR_THRESHOLD, most similar first; with
    `definitions` ({student: `definition_prints`}), also every pair with PAIR_FUNCTIONS
    `cross_matches` ({"definition ~ definition": share} where the graded names find too few)."""
    sets = {student: {name: set(v) for name, v in functions.items()}
            for student, functions in prints.items()}
    every = {student: {key: set(v) for key, v in held.items()}
             for student, held in (definitions or {}).items()}
    pairs = []
    for a, b in combinations(sorted(sets.keys() | every.keys()), 2):
        mine, theirs = sets.get(a, {}), sets.get(b, {})
        shared = {name: resemblance(mine[name], theirs[name])
                  for name in mine.keys() & theirs.keys()}
        close = {name: round(share, 2) for name, share in shared.items()
                 if share >= PAIR_THRESHOLD}
        if len(close) < PAIR_FUNCTIONS and a in every and b in every:
            close = cross_matches(every[a], every[b])
        if len(close) >= PAIR_FUNCTIONS:
            pairs.append((a, b, dict(sorted(close.items()))))
    return sorted(pairs, key=lambda pair: (-len(pair[2]), -sum(pair[2].values()), pair[:2]))
