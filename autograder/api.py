"""Grading from Python (the grader's own tests use this; `pytest autograder` is the CLI)."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

from autograder.options import GradingOptions
from autograder.trusted import checks  # noqa: F401  (registers the checks)
from autograder.trusted.core import CHECKS
from autograder.trusted.grader import ROOT
from autograder.trusted.session import GradingSession
from course.submissions.reader import MAX_NOTEBOOK_BYTES, MAX_PY_BYTES


def submission_problem(spec: str) -> str | None:
    """Why `--submission spec` names nothing that exists (None when it does): a usage error."""
    path = Path(spec)
    if not path.exists() and not path.is_absolute() and (ROOT / path).exists():
        path = ROOT / path
    if path.exists():
        return unreadable(path)
    if "/" not in spec and path.suffix == "" and spec.replace(".", "").replace("_", "").isalnum():
        try:
            if importlib.util.find_spec(spec.split(".")[0]) is not None:
                return None
        except (ImportError, ValueError):
            pass
        return f"--submission {spec}: no such file, folder or importable module"
    return f"--submission {spec}: no such file or folder"


def unreadable(path: Path) -> str | None:
    """Why the grader cannot read `path` or the notebooks and .py files in it (None: it can)."""
    files = [path]
    try:
        if path.is_dir():
            files = [p for p in path.iterdir() if p.suffix in (".ipynb", ".py") and p.is_file()]
        for file in files:
            os.close(os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
        size = path.stat().st_size if path.is_file() else 0
    except OSError as exc:
        return (
            f"--submission {path}: the grader cannot read {exc.filename or path} ({exc.strerror})"
        )
    limit = {".py": MAX_PY_BYTES, ".ipynb": MAX_NOTEBOOK_BYTES}.get(path.suffix)
    if limit and size > limit:  # one file and nothing else to grade: no grading to start
        return (f"--submission {path}: {size / 2**20:.1f} MiB, over the grader's limit of "
                f"{limit / 2**20:.0f} MiB for a {path.suffix} file")
    return None


def grade(submission: str, functions=None, probe_timeout: float = 30.0, seed: int | None = None,
          memory_mb: int = 6144, device: str = "cpu", official: bool = False,
          time_limit: float = GradingOptions.time_limit, sandbox=None,
          allow_reference: bool = False, stored_only: bool | None = None,
          isolation: str = "auto", copies: str = "flag") -> dict:
    """Run the checks of `functions` (default: all) on `submission`; never raises for its
    behaviour. Raises FileNotFoundError for a submission that does not exist, and
    IsolationUnavailable for an `official` grading where no sandbox can start. `sandbox`: a
    template started ahead for this grading alone (`instructor.batch`). `allow_reference`: pasted
    copies of the reference earn points (checking the solution notebooks). `stored_only`: judge
    from the stored cases alone (None: when this is a student edition). `isolation`: "auto",
    "bubblewrap" or "landlock" (the sandbox's tier, `autograder.trusted.isolation`). `copies`:
    "flag" or "zero" (what similarity to the reference does; "similarity" in the answer holds its
    evidence, `Grader.similarity_record`; "judged": {graded function: (file name, first line)}
    of the code a stage child judged for it, the class report's evidence). "incomplete"
    in the answer lists why the grading did not complete (then its score is no grade: see
    `Grader.incomplete`); `time_limit` is wall time from this call."""
    started = time.monotonic()
    problem = submission_problem(str(submission))
    if problem:
        raise FileNotFoundError(problem)
    options = GradingOptions(device, probe_timeout, memory_mb, seed, official, time_limit,
                             allow_reference, stored_only, isolation, copies)
    session = GradingSession(submission, options, sandbox, started)
    grader = session.grader
    grader.expect(functions)
    try:
        results = [grader.run_check(c) for c in CHECKS if functions is None
                   or c.function in functions]
    finally:
        tampering = session.finish()
    score, maximum = grader.totals()
    return {"results": {r["name"]: r for r in results}, "score": score, "max_score": maximum,
            "load_failure": grader.load_failure, "load_errors": grader.load_errors,
            "tampering": tampering, "practice": grader.practice, "stored_only": grader.stored_only,
            "isolation": grader.isolation_note, "isolation_tier": grader.isolation_tier,
            "incomplete": grader.incomplete, "similarity": grader.similarity_record(),
            "judged": dict(grader.judged)}
