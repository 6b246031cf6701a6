"""`pytest autograder`: options, the session's grader, results.json, and the score table.

    pytest autograder [--submission PATH|MODULE] [--results FILE] [--device cpu|cuda|auto]
                      [--official | --stored-only] [--time-limit SECONDS] [-k NAME]
                      [--copies flag|zero]

The submission runs in a bubblewrap sandbox (`autograder.trusted.isolation`). Where none can start,
the grade is a PRACTICE grade, said in the table and in results.json; `--official` refuses to grade
then (exit code 4, pytest's usage error), as it does for a --submission that does not exist.
In the student edition (and with --stored-only) the checks judge from stored cases only, without
the reference: a PRACTICE grade too, and `--official` is a usage error there.
Each check is one pytest test (`autograder/test_checks.py`); a check that loses points is a failed
test, so the reference (`--submission course`) exits 0 and anything short of full marks exits 1.
A grading that did not complete (the sandbox would not start, `--time-limit` ran out, the grader
failed on a check) is no grade: it writes no `--results` file, says GRADING DID NOT COMPLETE, and
exits 3. Every option's value is checked before torch is imported (`autograder.options`); bad
values are usage errors naming the flag (exit 4). `--time-limit` is wall time from this process's
start.
Similarity to the reference is evidence, shown under the table (and, in results.json, in a test
hidden from students); it costs points only with `--copies zero` (`autograder.trusted.reference`).
"""

from __future__ import annotations

import time

import pytest

from autograder.options import (
    COPIES,
    COPIES_HELP,
    DEVICES,
    ISOLATIONS,
    GradingOptions,
    cuda_problem,
    memory_mb,
    seconds,
    seed,
)
from course.paths import ROOT

STARTED = time.monotonic()  # the grading's one clock starts with the process (plugins load first)

EXIT_INCOMPLETE = 3  # pytest's "internal error": there is no grade


def pytest_addoption(parser) -> None:
    group = parser.getgroup("autograder")
    group.addoption("--submission", default="notebooks",
                    help="folder of notebooks, one .ipynb, one .py, or a module name (`course`)")
    group.addoption("--results", default=None, help="write Gradescope results.json here")
    group.addoption("--device", default="cpu", choices=DEVICES)
    group.addoption("--probe-timeout", type=seconds, default=GradingOptions.probe_timeout,
                    help="seconds a single call into the submission may take")
    group.addoption("--memory-mb", type=memory_mb, default=GradingOptions.memory_mb,
                    help="address space (MiB) the submission may use beyond the grader's libraries")
    group.addoption("--seed", type=seed, default=None,
                    help="seed of the fresh inputs (default: random)")
    group.addoption("--official", action="store_true",
                    help="an official grade: refuse to grade unless the sandbox isolates the "
                         "submission")
    group.addoption("--time-limit", type=seconds, default=GradingOptions.time_limit,
                    help="wall-clock seconds the whole grading may take, from the start "
                         f"(default: {GradingOptions.time_limit:g})")
    group.addoption("--stored-only", action="store_true",
                    help="judge from the stored cases alone, without the reference (a practice "
                         "grade; always so in the student edition)")
    group.addoption("--isolation", default="auto", choices=ISOLATIONS,
                    help="the sandbox's tier: the first that holds here (auto), bubblewrap, or "
                         "landlock (Landlock and seccomp, where namespaces are refused)")
    group.addoption("--copies", default="flag", choices=COPIES, help=COPIES_HELP)
    group.addoption("--allow-reference", action="store_true",
                    help="an instructor's check of the solution notebooks (which hold the "
                         "reference): no similarity flag, no penalty, and the grade says so; "
                         "never for a student's grade")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped without one")
    from autograder.api import submission_problem
    from autograder.trusted.grader import OFFICIAL_ELSEWHERE
    from autograder.trusted.isolation import sandbox_problem
    from course.paths import EDITION

    problem = submission_problem(config.getoption("--submission"))
    if problem is None and config.getoption("--device") == "cuda":
        problem = cuda_problem()
    official = config.getoption("--official")
    if problem is None and official and (EDITION.exists() or config.getoption("--stored-only")):
        problem = ("--official: this autograder grades from stored cases only (a practice grade); "
                   + OFFICIAL_ELSEWHERE)
    isolation = config.getoption("--isolation")
    if problem is None and official and sandbox_problem(ROOT, isolation):
        problem = ("--official: refusing to grade without isolation: "
                   f"{sandbox_problem(ROOT, isolation)}")
    if problem:  # no results.json: a refusal is no grade (see autograder.gradescope.run)
        raise pytest.UsageError(problem)


def notebook_stage(submission: str):
    """The stage whose notebook `submission` is (by its file name: `06_aggregation.ipynb`), or
    None for a folder, a module, a .py or a notebook of no stage: they are graded on every check."""
    from pathlib import Path

    from course.registry import REGISTRY

    return next((stage for stage in REGISTRY if Path(submission).name == stage.notebook), None)


def pytest_collection_modifyitems(config, items) -> None:
    """One stage's notebook is graded on its own functions' checks: the other notebooks' functions
    are not in it, and would fail as "not defined" one by one. The terminal summary says so."""
    stage = notebook_stage(config.getoption("--submission"))
    if stage is None:
        return
    kept = [item for item in items if not hasattr(item, "callspec")
            or item.callspec.params["check"].function in stage.functions]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        config.stash[_only_key] = (f"{stage.notebook}: graded on the {len(kept)} checks of its own "
                                   f"functions; the other notebooks' {len(items) - len(kept)} "
                                   "checks were not run (--submission notebooks grades them all)")
        items[:] = kept


_only_key = pytest.StashKey[str]()


class Session:
    """Created at the first check, so that `--collect-only` starts nothing."""

    def __init__(self, config):
        from autograder.trusted.session import GradingSession

        options = GradingOptions(
            device=config.getoption("--device"), probe_timeout=config.getoption("--probe-timeout"),
            memory_mb=config.getoption("--memory-mb"), seed=config.getoption("--seed"),
            official=config.getoption("--official"), time_limit=config.getoption("--time-limit"),
            allow_reference=config.getoption("--allow-reference"),
            stored_only=config.getoption("--stored-only") or None,
            isolation=config.getoption("--isolation"), copies=config.getoption("--copies"))
        self.grading = GradingSession(config.getoption("--submission"), options, started_at=STARTED)
        self.grader = self.grading.grader
        self.results_path = config.getoption("--results")
        self.results_problem: str | None = None  # why results.json could not be written
        self.incomplete: str | None = None  # why there is no grade (the grading did not complete)
        self.tampering: list[str] = []

    def finish(self, interrupted: bool = False) -> None:
        self.tampering = self.grading.finish()
        if interrupted:  # Ctrl-C, or a session stopped by an error: not every check was judged
            from autograder.trusted.grader import incomplete_note

            self.incomplete = incomplete_note(["it was interrupted before every check ran"])
        self.write()

    def write(self) -> None:
        from autograder.trusted.grader import GradingIncomplete, incomplete_note
        from autograder.trusted.results import ResultsError

        if self.grader.incomplete:
            self.incomplete = incomplete_note(self.grader.incomplete)
        if self.results_path and not self.incomplete:
            try:
                self.grader.write_results(self.results_path)
            except GradingIncomplete as exc:
                self.incomplete = str(exc)
            except ResultsError as exc:  # e.g. a link someone else planted at that name in /tmp
                self.results_problem = str(exc)


_session_key = pytest.StashKey[Session]()


@pytest.fixture(scope="session")
def grading(request) -> Session:
    config = request.config
    if _session_key not in config.stash:
        config.stash[_session_key] = Session(config)
        selected = [item.callspec.params["check"] for item in request.session.items
                    if hasattr(item, "callspec") and "check" in item.callspec.params]
        config.stash[_session_key].grader.expect({check.function for check in selected})
    return config.stash[_session_key]


def pytest_sessionfinish(session, exitstatus) -> None:
    grading_session = session.config.stash.get(_session_key, None)
    if grading_session is not None:
        grading_session.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        if grading_session.incomplete:
            session.exitstatus = EXIT_INCOMPLETE
        elif (grading_session.tampering
              or grading_session.results_problem) and session.exitstatus == 0:
            session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    from autograder.trusted.report import check_table, escape, similarity_lines, stage_table

    grading_session = config.stash.get(_session_key, None)
    if grading_session is None:
        return
    grader = grading_session.grader
    write = terminalreporter.write_line
    terminalreporter.section("autograder")
    if grading_session.incomplete:
        write(escape(grading_session.incomplete))
    write(grader.isolation_note)
    if only := config.stash.get(_only_key, None):
        write(only)
    for note in ([grader.load_failure] if grader.load_failure else []) + grader.load_errors:
        write(f"note: {escape(note)}")
    if grading_session.tampering:
        write("TAMPERING: " + escape("; ".join(grading_session.tampering)))
    if grading_session.results_problem:
        write(f"RESULTS NOT WRITTEN: {escape(grading_session.results_problem)}")
    for line in check_table(grader.results):
        write(line)
    write("")
    for line in stage_table(grader.results):
        write(line)
    for line in similarity_lines(grader.similar, grader.options.copies):
        write(line)
    write(f"({grader.seed_note})")
    if grading_session.incomplete:
        write("GRADING DID NOT COMPLETE: the points above are not a grade")
