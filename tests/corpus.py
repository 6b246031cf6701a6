"""The honest corpus: independent implementations of the graded functions, and what they hold of
each reference.

The similarity flag and the `--copies zero` thresholds (`autograder.trusted.reference`) are
calibrated on it, so it must include the code honest students actually write:
- tests/honest/: the natural first implementation that follows the notebooks' idioms
  (`natural.py`), tensors built first and filled (`tensors_first.py`), library calls and the
  dictated tokenizer (`library_calls.py`), and extra versions of the short functions (`short_*.py`);
- tests/autograder_cases/: closures (`_impl.py`), Python loops (`alt_loops.py`), torch.where and
  tables (`alt_functional.py`), one expression per step (`alt_vectorized.py`);
- tests/naive.py, the tests' slow versions; notebooks/, the release's given code and templates.
None was written from the reference; each is read, never run, here.
"""

from __future__ import annotations

from pathlib import Path

from autograder.trusted.grader import _sources
from autograder.trusted.reference import definitions_in, reference_shares
from course.registry import GRADED_FUNCTIONS
from course.submissions.reader import load_submission

ROOT = Path(__file__).resolve().parent.parent
HONEST_DIR = ROOT / "tests" / "honest"
CORPUS = sorted(str(p.relative_to(ROOT)) for p in HONEST_DIR.glob("*.py")) + [
    "tests/autograder_cases/_impl.py", "tests/autograder_cases/alt_loops.py",
    "tests/autograder_cases/alt_functional.py", "tests/autograder_cases/alt_vectorized.py",
    "tests/naive.py", "notebooks"]


def definitions(spec: str) -> list:
    """The definitions of corpus entry `spec`, read as the grader reads a submission."""
    return [d for source in _sources(load_submission(str(ROOT / spec), ROOT))
            for d in definitions_in(source)[1]]


def corpus_shares() -> dict[str, dict[str, float]]:
    """{corpus entry: {graded function: the largest share of its reference one of the entry's
    definitions holds, with the functions it calls}} (what the copy rule reads)."""
    return {spec: {name: share for name, (share, _) in reference_shares(definitions(spec)).items()}
            for spec in CORPUS}


def implementations() -> dict[str, list[str]]:
    """{graded function: the corpus entries that define it by its name}."""
    return {name: [spec for spec in CORPUS if name in {d.name for d in definitions(spec)}]
            for name in GRADED_FUNCTIONS}
