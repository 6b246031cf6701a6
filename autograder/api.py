"""Grading from Python (the grader's own tests use this; `pytest autograder` is the CLI)."""

from __future__ import annotations

from pathlib import Path

from autograder import checks  # noqa: F401  (registers the checks)
from autograder.core import CHECKS
from autograder.grader import ROOT, Grader
from autograder.sentinel import Sentinel
from autograder.submission import load_submission


def grade(submission: str, functions=None, probe_timeout: float = 30.0, seed: int | None = None,
          memory_mb: int = 6144, device: str = "cpu") -> dict:
    """Run the checks of `functions` (default: all) on `submission`; never raises for its behaviour."""
    loaded = load_submission(submission, ROOT)
    target = Path(loaded.target)
    sentinel = Sentinel(ROOT, [target] if target.is_dir() else [target.parent] if target.exists() else [])
    grader = Grader(loaded, device, probe_timeout, memory_mb, seed)
    try:
        results = [grader.run_check(c) for c in CHECKS if functions is None or c.function in functions]
    finally:
        grader.close()
    tampering = sentinel.restore()
    score, maximum = grader.totals()
    if tampering:
        score = 0.0
    return {"results": {r["name"]: r for r in results}, "score": score, "max_score": maximum,
            "load_failure": grader.load_failure, "load_errors": grader.load_errors, "tampering": tampering}
