"""Similarity to the reference, measured: how much of each reference honest work and near-copies
hold, and the thresholds calibrated on them.

    python benchmarks/bench_similarity.py

For every graded function, the share of its reference's winnowed fingerprints
(`autograder.trusted.similarity`) that the best definition of a submission holds with the
functions it calls (`autograder.trusted.reference.reference_shares`, what the flag reads):

- honest: the corpus of independent implementations (tests/corpus.py: tests/honest/, including
  the natural first implementations; the styles of tests/autograder_cases/; tests/naive.py; the
  release notebooks as handed out);
- near-copies: the reference with dead code, renamed, reordered, all three (tests/near_copies.py).

Prints the table, then per function the corpus's maximum and median, the near-copies' minimum,
the `--copies zero` threshold (`autograder.trusted.reference.THRESHOLDS`: the larger of FLOOR and
the maximum + MARGIN; none where that passes 1.0), and the same for pairs of classmates
(`instructor.classmates`).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from corpus import CORPUS, corpus_shares  # noqa: E402
from near_copies import DISGUISES, near_copy_source  # noqa: E402

from autograder.trusted.reference import (  # noqa: E402
    FLAG_AT,
    FLOOR,
    HONEST_MAX,
    MARGIN,
    THRESHOLDS,
    definitions_in,
    reference_shares,
)
from autograder.trusted.similarity import resemblance  # noqa: E402
from course.registry import GRADED_FUNCTIONS  # noqa: E402
from instructor.classmates import (  # noqa: E402
    PAIR_FUNCTIONS,
    PAIR_THRESHOLD,
    cross_matches,
    definition_prints,
    graded_prints,
)


def copy_shares(disguise: str) -> dict[str, float]:
    return {name: reference_shares(definitions_in(near_copy_source(name, disguise))[1])[name][0]
            for name in GRADED_FUNCTIONS}


def honest_pairs() -> dict[tuple[str, str, str], float]:
    """{(entry, entry, graded function): resemblance} over every pair of corpus entries."""
    prints = {Path(spec).name: graded_prints(str(ROOT / spec)) for spec in CORPUS[:-1]}
    names = sorted(prints)
    return {(a, b, f): resemblance(set(prints[a][f]), set(prints[b][f]))
            for i, a in enumerate(names) for b in names[i + 1:]
            for f in prints[a].keys() & prints[b].keys()}


def honest_cross_pairs() -> list[tuple[list[float], str, str]]:
    """[(the best shares of one-to-one matched definitions, most similar first, entry, entry)]
    over every pair of corpus entries, names ignored (`classmates.cross_matches` at threshold 0),
    the pair whose PAIR_FUNCTIONS-th match is highest first."""
    import instructor.classmates as classmates

    prints = {Path(spec).name: {k: set(v) for k, v in definition_prints(str(ROOT / spec)).items()}
              for spec in CORPUS[:-1]}
    names, threshold, rows = sorted(prints), classmates.PAIR_THRESHOLD, []
    classmates.PAIR_THRESHOLD = 0.0
    try:
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                shares = sorted(cross_matches(prints[a], prints[b]).values(), reverse=True)
                rows.append((shares + [0.0] * PAIR_FUNCTIONS, a, b))
    finally:
        classmates.PAIR_THRESHOLD = threshold
    return sorted(rows, key=lambda row: (-row[0][PAIR_FUNCTIONS - 1], row[1:]))


def classmate_copy_shares() -> dict[str, float]:
    """{graded function: resemblance of the reference and its disguised copy}, as two students."""
    shares = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in GRADED_FUNCTIONS:
            paths = []
            for label, disguise in (("a", "renamed"), ("b", "all three")):
                path = Path(folder) / f"{label}_{name}.py"
                path.write_text(near_copy_source(name, disguise), encoding="utf-8")
                paths.append(graded_prints(str(path)).get(name, []))
            shares[name] = resemblance(set(paths[0]), set(paths[1]))
    return shares


def main() -> None:
    rows = corpus_shares()
    copies = {f"copy: {d}": copy_shares(d) for d in DISGUISES}
    short = [name.split("_")[1][:6] if name.startswith("compute") else name[:6]
             for name in GRADED_FUNCTIONS]
    print(f"| {'submission':<22} | " + " | ".join(f"{s:>6}" for s in short) + " |")
    print("|" + "---|" * (len(short) + 1))
    for label, shares in {**{Path(s).name: v for s, v in rows.items()}, **copies}.items():
        print(f"| {label:<22} | " + " | ".join(f"{shares[n]:6.2f}" for n in GRADED_FUNCTIONS) + " |")
    print(f"\nper function ({len(CORPUS)} corpus entries; flagged above the corpus maximum and at "
          f"least {FLAG_AT}; threshold max({FLOOR}, maximum + {MARGIN}), none above 1.0):\n")
    print(f"| {'graded function':<34} | corpus max | median | near-copies min | threshold |")
    print("|---|---|---|---|---|")
    for name in GRADED_FUNCTIONS:
        honest = [shares[name] for shares in rows.values()]
        copied = min(shares[name] for shares in copies.values())
        threshold = THRESHOLDS[name]
        print(f"| {name:<34} | {max(honest):10.2f} | {statistics.median(honest):6.2f} | "
              f"{copied:15.2f} | {'none' if threshold is None else f'{threshold:.2f}':>9} |")
        assert HONEST_MAX[name] >= max(honest), f"{name}: HONEST_MAX is stale"
    pairs = honest_pairs()
    ranked = sorted(pairs, key=pairs.get, reverse=True)
    copy_pair = min(classmate_copy_shares().values())
    print("\nclassmates: the most similar honest pairs of one function: "
          + "; ".join(f"{a} ~ {b} on {f}: {pairs[a, b, f]:.2f}" for a, b, f in ranked[:3])
          + f"; a near-copy of a classmate at least {copy_pair:.2f}; pair threshold "
          f"{PAIR_THRESHOLD:.2f} on two functions")
    cross = honest_cross_pairs()
    print("classmates, every definition against every other's, names ignored: the honest pairs "
          f"whose match number {PAIR_FUNCTIONS} is highest: "
          + "; ".join(f"{a} ~ {b}: {', '.join(f'{x:.2f}' for x in shares[:PAIR_FUNCTIONS])}"
                      for shares, a, b in cross[:3])
          + f"; the best single match {max(shares[0] for shares, _, _ in cross):.2f} "
          f"({len(cross)} pairs)")
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}")


if __name__ == "__main__":
    main()
