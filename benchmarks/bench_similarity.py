"""The copy rule's threshold, measured: how much of each reference honest work and near-copies hold.

    python benchmarks/bench_similarity.py

For every graded function, the share of its reference's winnowed fingerprints
(`autograder.trusted.similarity`) that the best definition of a submission holds with the
functions it calls (`autograder.trusted.reference.reference_shares`, what the copy rule reads):

- honest: independent implementations in different styles (tests/autograder_cases/: `_impl.py`,
  closures; `alt_loops.py`, Python loops; `alt_functional.py`, torch.where and tables;
  `alt_vectorized.py`, one expression per step; tests/naive.py, the tests' naive versions) and the
  release notebooks as handed out (their given helpers and templates);
- near-copies: the reference with dead code, renamed, reordered, all three (tests/near_copies.py).

Prints the table, the largest honest share, the smallest near-copy share, and the threshold's
margins (`autograder.trusted.reference.COPY_THRESHOLD`).
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from near_copies import DISGUISES, near_copy_source  # noqa: E402

from autograder.trusted.grader import _sources  # noqa: E402
from autograder.trusted.reference import COPY_THRESHOLD, definitions_in, reference_shares  # noqa: E402
from autograder.trusted.similarity import resemblance  # noqa: E402
from course.registry import GRADED_FUNCTIONS  # noqa: E402
from course.submissions.reader import load_submission  # noqa: E402
from instructor.classmates import PAIR_THRESHOLD, graded_prints  # noqa: E402

HONEST = ["tests/autograder_cases/_impl.py", "tests/autograder_cases/alt_loops.py",
          "tests/autograder_cases/alt_functional.py", "tests/autograder_cases/alt_vectorized.py",
          "tests/naive.py", "notebooks"]


def honest_shares(spec: str) -> dict[str, float]:
    source = "\n".join(_sources(load_submission(str(ROOT / spec), ROOT)))
    return {name: share for name, (share, _) in reference_shares(definitions_in(source)[1]).items()}


def copy_shares(disguise: str) -> dict[str, float]:
    return {name: reference_shares(definitions_in(near_copy_source(name, disguise))[1])[name][0]
            for name in GRADED_FUNCTIONS}


def honest_pairs() -> dict[tuple[str, str, str], float]:
    """{(file, file, graded function): resemblance} over every pair of honest implementations."""
    prints = {Path(spec).name: graded_prints(str(ROOT / spec)) for spec in HONEST[:-1]}
    names = sorted(prints)
    return {(a, b, f): resemblance(set(prints[a][f]), set(prints[b][f]))
            for i, a in enumerate(names) for b in names[i + 1:]
            for f in prints[a].keys() & prints[b].keys()}


def classmate_copy_shares() -> dict[str, float]:
    """{graded function: resemblance of the reference and its disguised copy}, as two students."""
    import tempfile

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
    rows = {Path(spec).name: honest_shares(spec) for spec in HONEST}
    copies = {f"copy: {d}": copy_shares(d) for d in DISGUISES}
    short = [name.split("_")[1][:6] if name.startswith("compute") else name[:6]
             for name in GRADED_FUNCTIONS]
    print(f"| {'submission':<20} | " + " | ".join(f"{s:>6}" for s in short) + " |")
    print("|" + "---|" * (len(short) + 1))
    for label, shares in {**rows, **copies}.items():
        print(f"| {label:<20} | " + " | ".join(f"{shares[n]:6.2f}" for n in GRADED_FUNCTIONS) + " |")
    honest = max(v for shares in rows.values() for v in shares.values())
    copied = min(v for shares in copies.values() for v in shares.values())
    print(f"\nlargest honest share {honest:.2f}, smallest near-copy share {copied:.2f}, threshold "
          f"{COPY_THRESHOLD:.2f}: margins {COPY_THRESHOLD - honest:.2f} above honest work, "
          f"{copied - COPY_THRESHOLD:.2f} below the copies")
    pairs = honest_pairs()
    worst = max(pairs, key=pairs.get)
    copy_pair = min(classmate_copy_shares().values())
    print(f"\nclassmates: the most similar honest pair of one function {worst}: "
          f"{pairs[worst]:.2f} (next {sorted(pairs.values())[-2]:.2f}); a near-copy of a classmate "
          f"at least {copy_pair:.2f}; pair threshold {PAIR_THRESHOLD:.2f}")
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}")


if __name__ == "__main__":
    main()
