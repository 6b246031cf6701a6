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
`tokenize_prompt_and_output = f1`, or imported under its name) is read as that graded function.
Functions too short to tell apart (fewer than MIN_KGRAMS k-grams: a release template's
`raise NotImplementedError`, a one-line function) are left out.
"""

from __future__ import annotations

import ast
from itertools import combinations

from autograder.trusted.similarity import kgrams, resemblance, tokens

# Measured (`benchmarks/bench_similarity.py`, over the honest corpus of tests/corpus.py): the most
# similar pair of honest independent implementations of one function shares 0.77 of its k-grams
# (two natural tokenizers, a function the task all but dictates); a disguised copy of a classmate
# (renamed against dead code + reordered + renamed) shares 1.00. 0.85 leaves 0.08 above the worst
# honest case; two functions, because one short function can coincide honestly.
PAIR_THRESHOLD = 0.85
PAIR_FUNCTIONS = 2
MIN_KGRAMS = 15


def graded_prints(target: str) -> dict[str, list[str]]:
    """{graded function: sorted k-gram hashes of the submission's definition of it, with the
    functions it calls}, read (never run) from the submission at `target`."""
    from autograder.trusted.grader import _sources
    from autograder.trusted.reference import definitions_in, with_callees
    from course.paths import ROOT
    from course.registry import GRADED_FUNCTIONS
    from course.submissions.reader import load_submission

    definitions, bindings = [], {}
    for source in _sources(load_submission(target, ROOT)):
        tree, found = definitions_in(source)
        definitions += found
        bindings.update(bound_names(tree) if tree is not None else {})
    by_name = {d.name: d for d in definitions}
    for alias, name in bindings.items():  # `tokenize_prompt_and_output = f1`, followed along
        for _ in range(len(bindings)):  # a chain `a = b; b = f1`, never round a cycle
            if name in by_name or name not in bindings:
                break
            name = bindings[name]
        if name in by_name and alias in GRADED_FUNCTIONS:
            by_name[alias] = by_name[name]
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


def similar_pairs(prints: dict[str, dict[str, list[str]]]) -> list[tuple[str, str, dict]]:
    """[(student, student, {graded function: shared share})] for every pair of students with at
    least PAIR_FUNCTIONS graded functions over PAIR_THRESHOLD, most similar first."""
    sets = {student: {name: set(v) for name, v in functions.items()}
            for student, functions in prints.items()}
    pairs = []
    for a, b in combinations(sorted(sets), 2):
        shared = {name: resemblance(sets[a][name], sets[b][name])
                  for name in sets[a].keys() & sets[b].keys()}
        close = {name: round(share, 2) for name, share in shared.items()
                 if share >= PAIR_THRESHOLD}
        if len(close) >= PAIR_FUNCTIONS:
            pairs.append((a, b, dict(sorted(close.items()))))
    return sorted(pairs, key=lambda pair: (-len(pair[2]), -sum(pair[2].values()), pair[:2]))
