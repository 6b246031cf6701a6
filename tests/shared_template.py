"""Sandbox templates shared by the gradings of test submissions, one per grading at a time.

A grading spends most of its CPU starting its template (a sandboxed Python importing torch and
transformers: about 2 of the 2.4 core-seconds a one-function grading takes). The template never
runs student code: it forks one child per stage, under a user id of its own, and ends each child
with every process of that user and everything that user could write
(`autograder.untrusted.worker`). So what one grading's children could do to a later grading on the
same template is what one stage's child could do to the next stage's, which the red team's stage
attacks (tests/redteam/stages_*.py) try within one grading. The mutants, the do-nothing
submissions, the independent implementations and the red team's attacks are graded on shared
templates; each is ended (`Sandbox.close`: its processes, every process of its users, its cgroup,
its folders) before anything looks for what outlived the gradings.

The product never does this: every grading starts its own template (`autograder.api.grade`
without `sandbox=`, `instructor.batch`, `pytest autograder`), and so do the red team's later
gradings, the attacks of tests/test_autograder.py and the isolation tests.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from autograder.api import grade
from autograder.trusted.grader import ROOT
from autograder.trusted.isolation import isolation_tier
from autograder.trusted.sandbox import Sandbox


class SharedTemplate(Sandbox):
    """A template that outlives the gradings it serves: `close` (a grading ending) keeps it;
    `start` starts it again only if it stopped; `shutdown` ends it."""

    def start(self, timeout: float) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        self.shutdown(keep_folder=True)
        # whatever this first grading needs, the next may build a model or read notebooks: the
        # modules of both, as a template of the grading's own would hold them for it
        self.models = self.plots = True
        super().start(timeout)

    def close(self, keep_folder: bool = False) -> None:
        """A grading ended: the grader has reaped its children; the template stays."""

    def shutdown(self, keep_folder: bool = False) -> None:
        Sandbox.close(self, keep_folder)


class SharedTemplates:
    """`grade` on a template of this pool: one per grading running at once, started at its first
    grading and reused by the next; ends them all on exit. A template shows none of a submission's
    folders, which fits notebooks and .py files (an importable module's grading starts its own:
    `Grader` closes a template that does not fit). `memory_mb` and `tier` (an `isolation=` value)
    are the templates', so every grading's, and so is `device` (benchmarks/gpu_check.py grades the
    mutants on CUDA).

    A template dies with the thread that started it (`PR_SET_PDEATHSIG`, so that it never outlives
    its grader): `grade_all` grades on this object's own threads, which live as long as it does;
    a thread that calls `grade` itself must outlive the gradings that follow."""

    def __init__(self, memory_mb: int = 6144, tier: str | None = None, threads: int = 2,
                 device: str = "cpu"):
        self.memory_mb, self.tier, self.device = memory_mb, tier, device
        self.all: list[SharedTemplate] = []
        self.free: list[SharedTemplate] = []
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(threads)

    def grade_all(self, jobs: dict) -> dict:
        """{key: (args, kwargs) of `grade`} -> {key: its result}, as many at once as threads."""
        futures = {key: self.pool.submit(self.grade, *args, **kwargs) for key, (args, kwargs) in jobs.items()}
        return {key: future.result() for key, future in futures.items()}

    def grade(self, submission: str, functions=None, **kwargs) -> dict:
        # the template's limit is every grading's; another tier's grading starts its own
        if kwargs.setdefault("memory_mb", self.memory_mb) != self.memory_mb:
            raise ValueError(f"memory_mb={kwargs['memory_mb']}: these templates hold "
                             f"{self.memory_mb} MB")
        kwargs.setdefault("isolation", self.tier or "auto")
        kwargs.setdefault("device", self.device)
        with self.lock:
            template = self.free.pop() if self.free else None
        if template is None:
            template = SharedTemplate(ROOT, self.device, self.memory_mb, isolated=True,
                                      tier=isolation_tier(ROOT, kwargs["isolation"])[0])
            with self.lock:
                self.all.append(template)
        try:
            return grade(submission, functions, sandbox=template, **kwargs)
        finally:
            with self.lock:
                self.free.append(template)

    def __enter__(self) -> SharedTemplates:
        return self

    def __exit__(self, *exc) -> None:
        for template in self.all:
            template.shutdown()
        self.pool.shutdown()
