"""One grading, from the submission's path to the verdict: written once for `pytest autograder`
(autograder/conftest.py) and for `autograder.api.grade`.

A session reads the submission (never running it), starts the grader (which starts the sandbox at
the first check), and, for a practice grade without a sandbox, snapshots the places a submission
could plant files for the next grading (`Sentinel`). `finish` stops the worker and, if anything
was changed, grades every check 0 and says what changed.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from autograder.options import DEFAULT_OPTIONS, GradingOptions
from autograder.trusted.grader import ROOT, Grader
from autograder.trusted.sentinel import Sentinel
from course.submissions.reader import load_submission


def resolve_device(device: str) -> str:
    """"auto" -> "cuda" when a GPU is visible, else "cpu"; other values as given."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class GradingSession:
    def __init__(self, submission: str | Path, options: GradingOptions = DEFAULT_OPTIONS,
                 sandbox=None, started_at: float | None = None):
        from autograder.protocol.precision import use_ieee_float32
        from autograder.trusted import report, results  # noqa: F401  (before any student code)

        use_ieee_float32()  # the references judged here compute as the tolerances assume

        loaded = load_submission(submission, ROOT)
        options = replace(options, device=resolve_device(options.device))
        self.grader = Grader(loaded, options, sandbox=sandbox, started_at=started_at)
        target = Path(loaded.target)
        extra = [target] if target.is_dir() else [target.parent] if target.exists() else []
        # in the sandbox nothing outside it is writable; without one, look for what changed
        self.sentinel = Sentinel(ROOT, extra) if self.grader.practice else None
        self.tampering: list[str] = []

    def finish(self) -> list[str]:
        """Stop the worker; the files changed outside the submission (then every check scores 0)."""
        self.grader.close()
        self.tampering = self.sentinel.restore() if self.sentinel else []
        if self.tampering:
            for result in self.grader.results:
                result["score"] = 0.0
                result["status"] = "failed"
                result["output"] = ("graded 0: files outside the submission were changed while it "
                                    "ran: " + "; ".join(self.tampering[:5]))
        return self.tampering
