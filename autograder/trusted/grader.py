"""The grader: runs checks against a submission and keeps the score.

`Grader` owns the sandboxed worker and a client per stage (or, for notebook self-checks, the
in-process runner of `autograder.selfcheck`), the stored expected values, and the results. Checks
see it through `Context`, which turns every way a probe can go wrong — missing function, exception,
delegation, hang, crash — into a `Fail` with a clear message, so one broken function costs only its
own checks.

A stored-only grading (`stored_only`; always in the student edition, which holds no unrevealed
reference) judges from the stored cases of autograder/fixtures/expected.pt alone: no fresh case is
drawn, and a check that needs the reference is skipped and says so. It is a practice grade.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import stat
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from autograder.options import DEFAULT_OPTIONS, GradingOptions
from autograder.protocol.helpers import servable
from autograder.protocol.markers import MODEL_FUNCTIONS
from autograder.trusted import core
from autograder.trusted.core import (
    CASES,
    STORED_ONLY,
    Fail,
    NeedsReference,
    describe_error,
    plain_problem,
)
from autograder.trusted.isolation import isolation_tier
from autograder.trusted.reference import authorship, captured_evidence, course_sources
from autograder.trusted.report import SIMILARITY_TITLE, similarity_lines
from autograder.trusted.results import ResultsError, write_results
from autograder.trusted.sandbox import Sandbox, StageClient, WorkerError
from course.paths import EDITION, FIXTURES, ROOT
from course.registry import STAGE_OF
from course.submissions.parsing import parse
from course.submissions.reader import Submission

NO_FORK = ("skipped: this check forks data-parallel processes, and this Python has no os.fork "
           "(Windows); `pytest autograder` on Linux or macOS grades it")
OFFICIAL_ELSEWHERE = ("the official grade draws fresh cases and judges them with the reference: "
                      "Gradescope, `python -m instructor.batch`, or `pytest autograder --official` "
                      "in the full course repository")

STATUS_MESSAGES = {
    "missing": "{fn} is not defined in the submission",
    "not_callable": "{fn} is defined, but is not a function",
    "delegated": ("{fn} only calls the reference `course.{fn}`: write your own implementation "
                  "(calling the reference functions of earlier stages is fine)"),
}
# after "missing": why the name may be missing (a report that lists them once cuts it here)
READ_PROBLEMS = " (problems while reading the submission: "


def _unread_reason(function: str, response: dict, ready) -> str:
    """Why `function` earns nothing: its code, or code it reaches, was compiled at run time (the
    answer or the child's load report says where; hostile text, cut, and escaped where shown)."""
    unread = ready.get("unread") if isinstance(ready, dict) else None
    detail = response.get("why")
    if not isinstance(detail, str):
        detail = unread.get(function) if isinstance(unread, dict) else None
    detail = f" ({detail[:400]})" if isinstance(detail, str) else ""
    return (f"{function} is not graded: the code that would run is not the code the grader "
            f"read{detail}; write plain Python in the submission's own text")


@dataclass
class CaseRun:
    label: str
    inputs: dict
    expected: object
    fresh: bool
    diagnostics: dict | None = None  # stored cases only (`core.Case.diagnostics`)


def load_fixtures(path: Path = FIXTURES) -> dict:
    """{case name: {"fingerprint": definition, "seeds": {seed: {"inputs", "expected"}}}}."""
    if not path.exists():
        return {}
    return torch.load(path, weights_only=True)


def _visible_paths(submission: Submission) -> list[str]:
    """Folders the sandbox shows (read-only): an importable module's, for its imports (a .py
    submission and its helpers travel as text in the request, a notebook's cells too)."""
    if submission.kind == "module" and not submission.is_reference:
        with contextlib.suppress(Exception):
            spec = importlib.util.find_spec(submission.target.split(".")[0])
            if spec is not None and spec.origin:
                folder = Path(spec.origin).parent
                return [str(folder.parent if spec.submodule_search_locations else folder)]
    return []


MAX_SOURCE_FILES = 50  # .py files of a submission's folder read for copies
MAX_SOURCE_BYTES = 2**22  # of each


def _read_source(path: Path) -> str | None:
    with contextlib.suppress(OSError, ValueError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            return handle.read(MAX_SOURCE_BYTES).decode("utf-8", "replace")
    return None


def _imported_files(source: str, folder: Path, here: Path) -> list[Path]:
    """The files that `source`'s imports would load from `folder` (absolute imports) or `here`,
    the folder of the file itself (relative ones): `name.py`, `name/__init__.py`."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    wanted = []  # (folder, module name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wanted += [(folder, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wanted.append((folder, node.module.split(".")[0]))
        elif isinstance(node, ast.ImportFrom):
            wanted += [(here, name) for name in ([node.module.split(".")[0]] if node.module
                                                 else [alias.name for alias in node.names])]
    return [path for base, name in sorted(set(wanted))
            for path in (base / f"{name}.py", base / name / "__init__.py")]


def _sources(submission: Submission) -> list[str]:
    """The submission's source text (read, never run), to look for copies: a notebook's kept
    statements; a .py file and the helpers beside it that its imports load; a module's
    `__init__` and the files of its folder that its imports load (the sandbox shows that folder)."""
    if submission.kind == "units":
        return ["\n".join(source for _, source in unit["statements"]) for unit in submission.units]
    if submission.kind == "py":  # exactly the helpers the sandbox's finder may serve
        main = Path(submission.target).name
        return [submission.files[main]] + list(servable(submission.files, main).values())
    if submission.kind == "module" and submission.is_reference:
        return []
    folders = _visible_paths(submission)
    if not folders:
        return []
    folder = Path(folders[0])
    return _imported_texts(_imported_files(f"import {submission.target}", folder, folder),
                           _read_source, lambda text, here: _imported_files(text, folder, here))


def _imported_texts(todo: list, read, imports) -> list[str]:
    """The texts of `todo` and of what their imports load, in order: `read(key)` is a file's
    text (None: not there), `imports(text, folder of key)` the keys its imports would load."""
    texts, seen = [], set()
    while todo and len(seen) < MAX_SOURCE_FILES:
        key = todo.pop(0)
        if key in seen:
            continue
        seen.add(key)
        text = read(key)
        if text is not None:
            texts.append(text)
            todo += imports(text, Path(key).parent)
    return texts


def _import_trusted() -> None:
    """Import all the trusted side uses (checks, references; the model's modules: see
    `_import_model_code`) before any student code runs: nothing of the grader's is read from disk
    after that."""
    from autograder.trusted import checks, report, results  # noqa: F401
    from autograder.trusted.reference import reference
    from course.registry import GRADED_FUNCTIONS

    for name in GRADED_FUNCTIONS:
        reference(name)


def _import_model_code() -> None:
    """Build the tiny model once, which imports transformers' modeling code (~2 s): only for a
    grading that checks a function of `MODEL_FUNCTIONS`, before its student code runs."""
    from autograder.protocol.markers import build_model

    build_model(0, "float64")


class IsolationUnavailable(RuntimeError):
    """An official grading was asked for where no sandbox can start."""


class GradingIncomplete(ResultsError):
    """The grading did not complete, so there is no grade to write (the message says why)."""


def incomplete_note(reasons: list[str]) -> str:
    return ("GRADING DID NOT COMPLETE: this is not a grade (no results.json was written): "
            + "; ".join(reasons))


START_TIMEOUT = 90.0  # seconds for the sandbox to import torch (doubled on the one retry)
LOAD_TIMEOUT = 90.0  # and for a stage's child to load the submission (doubled on a starved retry)
SANDBOX_RESTARTS = 2  # a grading's sandbox that stops answering is started again this often
TIMEOUT_RETRIES = 2  # and a check whose probe timed out is run again, on a fresh child, this often


class SandboxStopped(Exception):
    """The sandbox stopped answering during a check (not the student's doing): the check is run
    again on a fresh sandbox (`Grader._run`)."""


class ProbeTimedOut(Exception):
    """A probe timed out: on an overloaded machine honest code can, so the check is run again on a
    fresh child before the time-out counts (`Grader._run`)."""


class Grader:
    def __init__(self, submission: Submission | None, options: GradingOptions = DEFAULT_OPTIONS,
                 runner=None, sandbox: Sandbox | None = None, started_at: float | None = None):
        """`options`: how this grading runs (`autograder.options.GradingOptions`): similarity to
        the reference is flagged (`similar`), and costs points only with `copies="zero"`; where
        the `isolation` asked for does not hold, a practice grade, never another tier.
        `runner`: where the submission runs when it is not a sandbox (`autograder.selfcheck`'s
        InProcessRunner, the notebook's own kernel: a practice grade); None: a sandbox.
        `sandbox`: a template started ahead for this grading alone (batch grading starts the
        next submission's while one is graded); it must not be used for another grading.
        `started_at`: the time.monotonic() the grading began (the process's start, for the CLI):
        `options.time_limit` is wall time from then."""
        self.options = options
        self.allow_reference = options.allow_reference
        self.stored_only = EDITION.exists() if options.stored_only is None else options.stored_only
        self.submission = submission
        self.device = device = options.device
        self.probe_timeout = options.probe_timeout
        self.memory_mb = memory_mb = options.memory_mb
        self.seed = options.seed if options.seed is not None \
            else int.from_bytes(os.urandom(3), "little") + 1000
        self.time_limit = options.time_limit
        self.start_time = time.monotonic() if started_at is None else started_at
        self.out_of_time = False  # the time limit stopped the grading before its last check
        self.grader_errors: list[str] = []  # checks the grader itself could not judge
        self.restarts = 0  # how often the sandbox was started again after it stopped answering
        self.timeouts = 0  # how many timed-out probes were given a second run
        self.stopped: str | None = None  # why the sandbox was given up on (then: incomplete)
        self.in_process = runner is not None
        self.expected = False  # whether `expect` has said which functions will be checked
        self.stages: dict[str, StageClient] = {}  # stage key -> the client of its child
        self.stage_failures: dict[str, str] = {}
        self.copied: dict[str, str] = {}  # graded function -> why it is not graded
        # (origin, source text) of code the submission compiled at run time, and of the helper
        # modules served to it, as its stage children reported them: evidence to read like its
        # files (the grade itself never runs code it did not read: `_unread_reason`)
        self.captured: list[tuple[str, str]] = []
        self.similar: dict = {}  # graded function -> `reference.Evidence` of its similarity
        # graded function -> (file name, first line) of the code a stage child judged for it
        # (hostile input: evidence for the class report, never a score)
        self.judged: dict[str, tuple[str, int]] = {}
        self.practice: str | None = None  # why this grade is only a practice grade
        self.isolation_tier: str | None = None  # "bubblewrap" | "landlock-seccomp" (results.json)
        if self.in_process:
            self.runner = runner
        else:
            _import_trusted()  # the model's modules wait for `expect`
            self.isolation_tier, self.practice = isolation_tier(ROOT, options.isolation)
            if options.official and self.practice:
                raise IsolationUnavailable(f"--official: refusing to grade without isolation: "
                                           f"{self.practice}")
            if options.official and self.stored_only:
                raise IsolationUnavailable("--official: a stored-only grading is a practice "
                                           "grade; "
                                           f"{OFFICIAL_ELSEWHERE}")
            fits = sandbox is not None and sandbox.isolated == (self.practice is None) \
                and sandbox.tier == self.isolation_tier and sandbox.device == device \
                and list(sandbox.visible) == _visible_paths(submission)
            if sandbox is not None and not fits:
                sandbox.close()
            self.runner = sandbox if fits else Sandbox(
                ROOT, device, memory_mb, isolated=self.practice is None,
                visible=_visible_paths(submission), tier=self.isolation_tier)
            if not options.allow_reference:
                self.copied, self.similar = authorship(_sources(submission), options.copies)
        self.fixtures = load_fixtures()
        self.results: list[dict] = []
        self.verdicts: dict[str, tuple] = {}  # check name -> (score, output), judged once
        # value checks failed by a near miss only: their gates stay open
        self.near: set[str] = set()
        self.case_cache: dict[str, list] = {}
        self.broken: dict[str, str] = {}  # function -> why its remaining checks fail fast
        self.load_failure: str | None = None
        self.load_errors: list[str] = list(submission.problems) if submission else []
        self.started = not self.in_process and self.runner.process is not None

    @property
    def isolation_note(self) -> str:
        note = self._isolation()
        if self.stored_only:
            note = ("PRACTICE grade (stored cases only): judged from the cases stored with this "
                    "autograder, no fresh inputs; checks that need the reference are skipped; "
                    f"{OFFICIAL_ELSEWHERE}. " + note)
        if self.allow_reference:
            return ("NOT A STUDENT'S GRADE (--allow-reference, an instructor's check of the "
                    "solutions): copies of the reference earn points and are not flagged. " + note)
        if self.options.copies == "zero":
            note = ("--copies zero: a graded function more similar to its reference than its "
                    "threshold (calibrated on independent implementations) earns nothing. " + note)
        return note

    def _isolation(self) -> str:
        if self.in_process:
            return "PRACTICE grade: run in the notebook's own process, not isolated"
        if self.practice:
            return (f"PRACTICE grade: the submission ran WITHOUT isolation ({self.practice}); "
                    "an official grade needs the bubblewrap sandbox or Landlock and seccomp")
        if self.isolation_tier == "landlock-seccomp":
            return ("isolated (tier 2, landlock-seccomp): each stage ran alone under its own user "
                    "id with Landlock and seccomp, without namespaces; memory bounded per process "
                    f"and, for the whole grading, {self.runner.memory_bound}")
        return ("isolated (tier 1, bubblewrap): each stage ran alone in a bubblewrap sandbox; "
                "memory bounded per process and, for the whole grading, "
                f"{self.runner.memory_bound}")

    # ---- talking to the submission -------------------------------------------------------
    def _remaining(self) -> float:
        return self.time_limit - (time.monotonic() - self.start_time)

    def _ensure_started(self) -> None:
        if self.started:
            return
        self.started = True
        if not self.expected:
            self.expect(None)  # not told: every function, and the model's modules imported now
        if self.in_process:
            self.load_errors.extend(self.runner.start().get("errors", []))
            return
        for attempt in (1, 2):  # a start that times out under load is retried once
            remaining = self._remaining()
            if remaining <= 0:
                self.out_of_time = True
                return
            try:
                self.runner.start(min(START_TIMEOUT * attempt, remaining))
                return
            except WorkerError as exc:
                if exc.kind == "overloaded" and remaining < START_TIMEOUT * attempt:
                    self.out_of_time = True  # the grading's clock ran out, not the sandbox
                    return
                if exc.kind == "overloaded" and attempt == 1:
                    continue
                self.load_failure = (f"{exc} (tried twice; this says nothing about your code)"
                                     if exc.kind == "overloaded" else
                                     f"the grader could not start its sandbox: {exc}")
            except Exception as exc:  # the worker could not even start
                self.load_failure = (f"the grader could not start its worker: "
                                     f"{type(exc).__name__}: {exc}")
            return

    def expect(self, functions) -> None:
        """The graded functions this grading will check (None: all); called before any student
        code runs. Only if one of them builds a model do this process and the template import
        transformers' modeling code (about 2 s each, which a started-ahead template pays before it
        is needed); otherwise a child that does build one imports it itself."""
        self.expected = True
        if self.in_process:
            return
        models = functions is None or any(f in MODEL_FUNCTIONS for f in functions)
        self.runner.models = models
        self.runner.plots = self.submission is not None and self.submission.kind == "units"
        if models:
            _import_model_code()

    def _stage_client(self, stage: str) -> StageClient:
        """The stage's child, started (with one retry for a timeout or a stopped sandbox). At
        most one stage's child is alive: another stage's is ended first (it and every process of
        its user, and what it wrote is wiped), so no two stages can exchange anything; a stage
        met again gets a fresh child."""
        if stage in self.stages:
            return self.stages[stage]
        for other in list(self.stages):
            self.stages.pop(other).close()
        config = {"submission": self.submission.to_request(), "device": self.device,
                  "stage": stage, "paths": _visible_paths(self.submission),
                  "grading_reference": self.submission.is_reference,
                  # an instructor's check of the solutions: code made at run time earns too
                  "allow_unread": self.allow_reference,
                  "course": course_sources(None if self.submission.is_reference else stage)}
        # tier 2 has no network namespace: a stage with a data-parallel check gets its gloo
        # ranks forked and connected before the submission loads (`autograder.untrusted.ranks`)
        ranks = max((c.needs_processes for c in core.CHECKS if c.stage == stage), default=0) \
            if self.isolation_tier == "landlock-seccomp" else 0
        client = StageClient(self.runner, stage, config, LOAD_TIMEOUT, self.memory_mb, ranks)
        for attempt in (1, 2):
            remaining = self._remaining()
            if remaining <= 0:
                self.out_of_time = True
                client.close()
                raise Fail(self._out_of_time_note())
            client.load_timeout = min(LOAD_TIMEOUT * attempt, remaining)
            try:
                ready = client.start()
                break
            except WorkerError as exc:
                if exc.kind in ("timeout", "overloaded", "loop") \
                        and remaining < LOAD_TIMEOUT * attempt:
                    self.out_of_time = True
                    client.close()
                    raise Fail(self._out_of_time_note()) from None
                if self.runner.process is None:  # the sandbox itself stopped: not the student's
                    client.close()
                    raise SandboxStopped(str(exc)) from None
                # starved (it had little CPU) or stopped: once more with twice the time; a loop
                # (it had the CPU and did not finish) is the submission's at once
                if exc.kind in ("timeout", "overloaded") and attempt == 1:
                    continue
                client.close()
                why = (f"loading it timed out twice ({exc}): the grader may be overloaded, or "
                       "the submission's top-level code waits for something that never comes"
                       if exc.kind == "timeout" else str(exc))
                self.stage_failures[stage] = f"the submission could not be loaded: {why}"
                raise Fail(self.stage_failures[stage]) from None
        self.load_errors.extend(e for e in ready.get("errors", []) if e not in self.load_errors)
        self._keep_captured(ready.get("captured"))
        self._keep_judged(ready.get("judged"))
        self.stages[stage] = client
        return client

    def request(self, message: dict, timeout: float | None = None) -> dict:
        self._ensure_started()
        function = message["function"]
        if self.out_of_time:
            raise Fail(self._out_of_time_note())
        if self.load_failure:
            raise Fail(self.load_failure)
        remaining = self._remaining()
        if remaining <= 0:
            self.out_of_time = True
            raise Fail(self._out_of_time_note())
        if function in self.broken:
            raise Fail(f"{function} was stopped in an earlier check: {self.broken[function]}")
        stage = STAGE_OF[function]
        if stage in self.stage_failures:
            raise Fail(self.stage_failures[stage])
        runner = self.runner if self.in_process else self._stage_client(stage)
        allowed = timeout or self.probe_timeout
        try:
            response = runner.request(message, min(allowed, remaining))
        except WorkerError as exc:
            if not self.in_process and self.runner.process is None:
                raise SandboxStopped(str(exc)) from None  # the grader's failure: retried
            if exc.kind in ("timeout", "loop") and remaining < allowed:  # the grading's clock
                self.out_of_time = True
                raise Fail(self._out_of_time_note()) from None
            # starved (little CPU): run again; a loop (it had the CPU) counts at once
            if exc.kind == "timeout" and self.timeouts < TIMEOUT_RETRIES:
                self.timeouts += 1
                raise ProbeTimedOut(str(exc)) from None
            self.broken[function] = str(exc)
            raise Fail(f"{function}: {exc}") from None
        status = response.get("status")
        if status == "unread":
            raise Fail(_unread_reason(function, response, getattr(runner, "ready", None)))
        if status in STATUS_MESSAGES:
            message_text = STATUS_MESSAGES[status].format(fn=function)
            if status == "missing" and self.load_errors:
                message_text += (f"{READ_PROBLEMS}"
                                 + "; ".join(map(plain_problem, self.load_errors[:3])) + ")")
            raise Fail(message_text)
        return response

    def _keep_judged(self, judged) -> None:
        """Keep the well-formed entries of a load report's `judged` for graded functions."""
        from course.registry import GRADED_FUNCTIONS

        for name, where in judged.items() if isinstance(judged, dict) else ():
            if name in GRADED_FUNCTIONS and isinstance(where, list) and len(where) == 2 \
                    and isinstance(where[0], str) and type(where[1]) is int:
                self.judged.setdefault(name, (where[0], where[1]))

    def _keep_captured(self, captured) -> None:
        """The source texts the stage child saw compiled at run time or served as helpers
        (`autograder.untrusted.provenance`): hostile input, kept only as (origin, text) strings."""
        for pair in captured if isinstance(captured, list) else []:
            if isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair) \
                    and tuple(pair) not in self.captured:
                self.captured.append(tuple(pair))
        if self.captured and not self.allow_reference:  # evidence, read like its files
            for name, found in captured_evidence(self.captured).items():
                self.similar.setdefault(name, found)

    def _out_of_time_note(self) -> str:
        return (f"the whole grading ran past its time limit ({self.time_limit:g} s, "
                "`--time-limit`): this check was not run")

    @property
    def incomplete(self) -> list[str]:
        """Why this grading did not complete (empty when it did): then it is no grade at all, and
        no results.json is written (see `autograder.gradescope.run`)."""
        reasons = []
        if self.load_failure:
            reasons.append(self.load_failure)
        if self.out_of_time:
            reasons.append(f"it ran past its time limit of {self.time_limit:g} s (`--time-limit`, "
                           "wall time from the start) before every check was run")
        if self.grader_errors:
            reasons.append(f"the grader itself failed on {len(self.grader_errors)} check(s): "
                           + "; ".join(self.grader_errors[:3]))
        if self.stopped:
            reasons.append(self.stopped)
        if not self.in_process and self.runner.cleanup_failures:
            reasons.append("; ".join(self.runner.cleanup_failures[:2]))
        return reasons

    # ---- results ---------------------------------------------------------------------------
    def run_check(self, check: core.Check) -> dict:
        started = time.monotonic()
        if check.needs_cuda and self.device != "cuda":
            return self._record(check, None, "skipped: needs --device cuda and a GPU", started)
        if check.needs_processes and not hasattr(os, "fork"):  # a self-check on Windows
            return self._record(check, None, NO_FORK, started)
        score, output = self._judge(check)
        if check.gate and score is not None:
            gate_score, gate_output = self._judge(core.CHECK_NAMED[check.gate])
            if gate_score is None:
                score, output = None, f"skipped: paid only with '{check.gate}', which is skipped"
            elif gate_score == 0 and check.gate not in self.near:
                note = f"paid only when '{check.gate}' passes"
                output = (f"this check passes, but it is {note}, and that check failed: "
                          f"{gate_output}"
                          if score else f"{output} ({note})")
                score = 0.0
        return self._record(check, score, output, started)

    def _judge(self, check: core.Check) -> tuple:
        """(score, output) of `check` on its own, judged once per grading (gates reuse it); score
        None: skipped (a stored-only grading reached for the reference)."""
        if check.name not in self.verdicts:
            blocked = STORED_ONLY.set(self.stored_only)
            try:
                self._run(check)
                self.verdicts[check.name] = (check.points, "passed")
            except NeedsReference as exc:
                self.verdicts[check.name] = (None, f"skipped: {exc}")
            except Fail as exc:
                self.verdicts[check.name] = (0.0, str(exc))
                if exc.near:
                    self.near.add(check.name)
            except Exception:  # a judge must never take the grader down; its error is the
                # instructor's to read (the grader's stderr), never the student's
                traceback.print_exc()
                self.grader_errors.append(check.name)
                self.verdicts[check.name] = (0.0, "the grader itself failed on this check (an "
                                             "error in the grader, not in your code)")
            finally:
                STORED_ONLY.reset(blocked)
            copied = self.copied.get(check.function)
            if copied and self.verdicts[check.name][0] is not None:  # run all the same: the
                # student sees what the checks say, and the sandbox meets whatever the code does
                self.verdicts[check.name] = (0.0, f"{copied} (the check ran all the same: "
                                                  f"{self.verdicts[check.name][1]})")
        return self.verdicts[check.name]

    def _run(self, check: core.Check) -> None:
        """Run `check`; where the sandbox stopped under it (an overloaded machine), start a fresh
        sandbox and run the check again, up to SANDBOX_RESTARTS times in a grading; beyond that
        the grading is incomplete (`stopped`), and this check and the ones after it say so. A
        probe that timed out is run again too (its child was ended: the next request forks a fresh
        one), up to TIMEOUT_RETRIES times in a grading; beyond that a time-out is the check's."""
        while True:
            if self.stopped:
                raise Fail(self.stopped)
            try:
                return check.run(Context(self, check))
            except ProbeTimedOut as exc:
                print(f"a probe of {check.name} timed out, run again: {exc}", file=sys.stderr)
            except SandboxStopped as exc:
                print(f"the sandbox stopped during {check.name}: {exc}", file=sys.stderr)
                if self.restarts >= SANDBOX_RESTARTS:
                    self.stopped = (f"the grader's sandbox stopped answering {self.restarts + 1} "
                                    "times (the machine is overloaded, or the grader failed): "
                                    "this says nothing about your code")
                    continue
                self.restarts += 1
                for client in self.stages.values():
                    client.close()
                self.stages.clear()
                self.started = False
                self._ensure_started()
                if self.load_failure or self.out_of_time:
                    raise Fail(self.load_failure or self._out_of_time_note()) from None

    def _record(self, check, score, output, started) -> dict:
        result = {"name": check.name, "function": check.function, "stage": check.stage,
                  "score": score or 0.0, "max_score": 0.0 if score is None else float(check.points),
                  "status": "skipped" if score is None else "passed" if score == check.points
                  else "failed",
                  "output": output, "visibility": "visible",
                  "execution_time": round(time.monotonic() - started, 3)}
        self.results = [r for r in self.results if r["name"] != check.name] + [result]
        return result

    def totals(self) -> tuple[float, float]:
        graded = [r for r in self.results if r["status"] != "skipped"]
        return sum(r["score"] for r in graded), sum(r["max_score"] for r in graded)

    def write_results(self, path: str | Path) -> None:
        """Gradescope's results.json, escaped and written safely (`autograder.trusted.results`);
        GradingIncomplete, writing nothing, for a grading that did not complete."""
        if self.incomplete:
            raise GradingIncomplete(incomplete_note(self.incomplete))
        score, _ = self.totals()
        seed = self.seed_note if self.stored_only else f"fresh-input seed {self.seed}"
        notes = [self.isolation_note, seed] + [plain_problem(e) for e in self.load_errors[:10]]
        if len(self.load_errors) > 10:
            notes.append(f"... and {len(self.load_errors) - 10} more problems with the submission")
        if self.load_failure:
            notes.insert(0, self.load_failure)
        tests = [{k: r[k] for k in ("name", "score", "max_score", "status", "output", "visibility")}
                 for r in self.results]
        if self.similar:  # a test of 0 points that Gradescope shows instructors only ("hidden")
            tests.append({"name": SIMILARITY_TITLE, "score": 0.0, "max_score": 0.0,
                          "status": "passed", "visibility": "hidden",
                          "output": "\n".join(similarity_lines(self.similar,
                                                               self.options.copies)[1:])})
        # extra_data: Gradescope keeps it with the result and shows it to no one
        extra = {"practice": bool(self.practice or self.in_process or self.stored_only),
                 "isolation_tier": self.isolation_tier, "allow_reference": self.allow_reference,
                 "copies": self.options.copies, "similarity": self.similarity_record()}
        document = {"score": score, "execution_time": round(time.monotonic() - self.start_time, 2),
                    "output": "\n".join(notes), "visibility": "visible",
                    "stdout_visibility": "hidden", "tests": tests, "extra_data": extra}
        write_results(document, path)

    def similarity_record(self) -> dict[str, dict]:
        """{graded function: its similarity flag}, for results.json's extra_data and the batch
        CSV."""
        return {name: {"share": round(found.share, 2), "holder": found.holder,
                       "honest_max": found.honest_max, "threshold": found.threshold,
                       "zeroed": self.options.copies == "zero" and found.penalized,
                       "summary": found.summary(), "evidence": found.text()}
                for name, found in self.similar.items()}

    @property
    def seed_note(self) -> str:
        if self.stored_only:
            return f"stored cases only (property checks drew fresh inputs with --seed {self.seed})"
        return f"fresh inputs drawn with --seed {self.seed}"

    def close(self) -> None:
        for client in self.stages.values():
            client.close()
        self.runner.close()


class Context:
    """What a check sees: the submission (through probes), the cases, and the device."""

    def __init__(self, grader: Grader, check: core.Check):
        self.grader = grader
        self.check = check
        self.device = grader.device

    def outcome(self, function: str, kwargs: dict, **options) -> dict:
        """The probe's full answer, ok or error (missing/delegated/hang/crash raise Fail)."""
        return self.grader.request({"kind": "call", "function": function, "kwargs": kwargs,
                                    **options})

    def call(self, function: str, kwargs: dict, **options) -> dict:
        """The probe's answer; an exception in the student's code fails the check."""
        response = self.outcome(function, kwargs, **options)
        if response.get("status") != "ok":
            raise Fail(describe_error(function, response, self.grader.load_errors))
        return response

    def train_steps(self, runs: list, model: dict, lr: float = 1.0, ddp: bool = False,
                    timeout: float | None = None) -> list:
        kind = "train_step_ddp" if ddp else "train_step"
        response = self.grader.request(
            {"kind": kind, "function": "grpo_train_step", "runs": runs, "model": model, "lr": lr,
             "timeout": timeout or self.grader.probe_timeout},
            timeout=(timeout or self.grader.probe_timeout) * (1 if ddp else len(runs)) + 10)
        if response.get("status") != "ok" or not isinstance(response.get("runs"), list) \
                or len(response["runs"]) != len(runs):
            raise Fail(describe_error("grpo_train_step", response))
        return response["runs"]

    def cases(self, name: str) -> list[CaseRun]:
        """The stored cases (inputs and expected from the fixtures) and one fresh case (drawn from
        --seed, expected computed by the reference now, in this trusted process); in a stored-only
        grading the stored cases alone."""
        if name not in self.grader.case_cache:
            self.grader.case_cache[name] = self._make_cases(name)
        return self.grader.case_cache[name]

    def fresh_case(self, name: str) -> CaseRun:
        """One case for a check that needs a single one: the fresh case, or in a stored-only
        grading the first stored one."""
        return self.cases(name)[-1 if not self.grader.stored_only else 0]

    def _make_cases(self, name: str) -> list[CaseRun]:
        spec = CASES[name]
        stored = self.grader.fixtures.get(name)
        # a stored-only grading cannot remake the inputs (a definition may call the reference):
        # its fixtures are the ones written with this autograder (the student edition's build)
        if stored is None or (not self.grader.stored_only
                              and stored.get("fingerprint") != core.case_fingerprint(spec)):
            raise RuntimeError(f"the stored case {name!r} is missing or its definition changed: "
                               "run `python -m instructor.fixtures`")
        runs = [CaseRun(f"case {number}", entry["inputs"], entry["expected"], False,
                        entry.get("diagnostics"))
                for number, entry in enumerate((stored["seeds"][str(seed)] for seed in spec.seeds),
                                               start=1)]
        if self.grader.stored_only:
            return runs
        with core.one_thread():
            fresh_inputs = spec.make(self.grader.seed)
            runs.append(CaseRun(f"fresh case (seed {self.grader.seed})", fresh_inputs,
                                spec.expected(fresh_inputs), True))
        return runs
