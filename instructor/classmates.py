"""Similar work across a class: pairs of students whose graded functions are near-identical.

The same method as the copy rule (`autograder.trusted.similarity`: canonical AST k-grams, so
renaming, reformatting, reworded messages, dead code and reordered statements do not hide a
shared function), applied between students instead of against the reference. For each graded
function a student defines, `graded_prints` keeps the k-gram hashes of the definition with the
functions of the submission it calls; two students are a pair when at least PAIR_FUNCTIONS of
their graded functions share PAIR_THRESHOLD of the smaller one's k-grams (`similarity.resemblance`).

A pair is a flag for the instructor to review (`instructor.batch` writes it in the CSV and a
report beside it), never a penalty: students may share a starting point the course gave them.
Functions too short to tell apart (fewer than MIN_KGRAMS k-grams: a release template's
`raise NotImplementedError`, a one-line function) are left out.
"""

from __future__ import annotations

from itertools import combinations

from autograder.trusted.similarity import kgrams, resemblance, tokens

# Measured (`benchmarks/bench_similarity.py`): the most similar pair of honest independent
# implementations of one function shares 0.34 of its k-grams (and an honest tokenizer holds 0.58
# of the reference's fingerprints, the worst case of a function the task all but dictates); a
# disguised copy of a classmate (renamed against dead code + reordered + renamed) shares 1.00.
# 0.85 leaves 0.27 above the worst honest case; two functions, because one short function can
# coincide honestly.
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

    definitions = [d for source in _sources(load_submission(target, ROOT))
                   for d in definitions_in(source)[1]]
    by_name = {d.name: d for d in definitions}
    prints = {}
    for name in GRADED_FUNCTIONS:
        if name in by_name:
            held = sorted(set().union(*(kgrams(tokens(d))
                                        for d in with_callees(by_name[name], by_name))))
            if len(held) >= MIN_KGRAMS:
                prints[name] = held
    return prints


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
