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
from autograder.trusted.submission import load_submission  # noqa: E402
from course.registry import GRADED_FUNCTIONS  # noqa: E402

HONEST = ["tests/autograder_cases/_impl.py", "tests/autograder_cases/alt_loops.py",
          "tests/autograder_cases/alt_functional.py", "tests/autograder_cases/alt_vectorized.py",
          "tests/naive.py", "notebooks"]


def honest_shares(spec: str) -> dict[str, float]:
    source = "\n".join(_sources(load_submission(str(ROOT / spec), ROOT)))
    return {name: share for name, (share, _) in reference_shares(definitions_in(source)[1]).items()}


def copy_shares(disguise: str) -> dict[str, float]:
    return {name: reference_shares(definitions_in(near_copy_source(name, disguise))[1])[name][0]
            for name in GRADED_FUNCTIONS}


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
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}")


if __name__ == "__main__":
    main()
