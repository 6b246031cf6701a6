"""One sandbox template per test thread, shared by the gradings of benign test submissions.

A grading spends most of its time starting its template (a sandboxed Python importing torch and
transformers: about 3 of the 4 s a one-function grading takes on a 2-core machine). The template
never runs student code: it forks one child per stage, and ends each child with every process of
its user and everything that user could write (`autograder.untrusted.worker`). So the gradings of
the mutants, the do-nothing submissions and the independent implementations, which test what the
checks say and not the isolation, can share one template without one seeing another.

The product never does this: every grading starts its own template (`autograder.api.grade`
without `sandbox=`, `instructor.batch`, `pytest autograder`), and the red team's attacks, the
isolation tests, are graded that way.
"""

from __future__ import annotations

import threading

from autograder.api import grade
from autograder.trusted.grader import ROOT
from autograder.trusted.sandbox import Sandbox


class SharedTemplate(Sandbox):
    """A template that outlives the gradings it serves: `close` (a grading ending) keeps it;
    `start` starts it again only if it stopped; `shutdown` ends it."""

    def start(self, timeout: float) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        self.shutdown(keep_folder=True)
        super().start(timeout)

    def close(self, keep_folder: bool = False) -> None:
        """A grading ended: the grader has reaped its children; the template stays."""

    def shutdown(self, keep_folder: bool = False) -> None:
        Sandbox.close(self, keep_folder)


class SharedTemplates:
    """`grade` with this thread's template, started at its first grading; ends them all on exit.
    A template shows none of a submission's folders, which fits notebooks and .py files (an
    importable module's grading starts its own: `Grader` closes a template that does not fit)."""

    def __init__(self, memory_mb: int = 6144):
        self.memory_mb = memory_mb
        self.local = threading.local()
        self.all: list[SharedTemplate] = []
        self.lock = threading.Lock()

    def grade(self, submission: str, functions=None, **kwargs) -> dict:
        if not hasattr(self.local, "template"):
            self.local.template = SharedTemplate(ROOT, "cpu", self.memory_mb, isolated=True)
            with self.lock:
                self.all.append(self.local.template)
        return grade(submission, functions, sandbox=self.local.template,
                     memory_mb=self.memory_mb, **kwargs)

    def __enter__(self) -> SharedTemplates:
        return self

    def __exit__(self, *exc) -> None:
        for template in self.all:
            template.shutdown()
