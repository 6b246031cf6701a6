"""Grade a whole class: `python -m instructor.batch DIR --jobs N --csv grades.csv`.

    python -m instructor.batch submissions/ --jobs 2 --csv grades.csv [--feedback OUT] [--regrade]
                               [--copies flag|zero]

Every entry of DIR is one student, named by the entry: a folder of notebooks (`alice/`), one
notebook (`bob.ipynb`) or one .py file (`carol.py`). Each is graded officially (in the bubblewrap
sandbox, with fresh inputs: see `autograder.trusted.isolation`), `--jobs` at a time.

Nothing is lost and nothing is graded twice: each student's grade is stored, as soon as it is
known, in its own file under `<csv>.results/` (written whole or not at all:
`autograder.trusted.results`), with a digest of what was graded. A run that is interrupted is
resumed by running the same command: a student whose stored grade matches the entry as it is now is
skipped, unless `--regrade`. The CSV (`student,score,max_score`, then one column per stage) and the
feedback files (one per student, every check with its diagnosis) are written from the stored grades.

What is reused between submissions: each job is a process that imported the trusted side once
(torch, the checks, the references, the model). What is not: every submission gets a sandbox of
its own (a fresh template, started while the job's previous submission is being graded, so that
its start costs no wall time), whose stage children run under their own user ids; a .py
submission is copied alone into a private folder. So no student sees another's files, nor
anything a previous submission left in a sandbox's /tmp or /dev/shm. A submission that crashes or
hangs is stopped by the grader's time limits and costs only its own row; a grading that fails on the
trusted side costs only its row too.

A grading that did not complete (the sandbox would not start, the time limit ran out, the grader
failed) is no grade: its row says `incomplete` where the score would be, with no stage points, its
feedback file says GRADING DID NOT COMPLETE and why, and the next run grades it again. Such an
entry is first graded once more, after the others, in the same run (an overloaded machine passes).

Similar work is flagged for the instructor, never shown in a student's feedback: pairs of
classmates (`instructor.classmates`: the `similar_to` column) and graded functions more similar to
the reference than independent work (`similar_to_reference`), with the matched lines in
`<csv>.similar.txt`. It costs points only with `--copies zero` (`autograder.trusted.reference`).
"""

# ruff: noqa: E402  (nothing is imported before sys.path is made safe, below)
from __future__ import annotations

import os  # both already loaded by the interpreter's start: never read from the current folder
import sys

# `python -m` puts the current folder first on sys.path: a `course/` (or `torch/`) there would be
# imported instead of the real one, and run as the instructor. Nothing is imported from it: the
# folder is dropped before any import of the project (unless it is the project itself).
_HERE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_CWD = os.path.realpath(os.getcwd())
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _CWD or _CWD == _HERE]

import csv
import hashlib
import io
import json
import multiprocessing
import multiprocessing.util
import secrets
import shutil
import signal
import stat
import tempfile
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from autograder.options import COPIES, COPIES_HELP, Parser, memory_mb, positive_int, seconds
from course.cli import unwritable

SUFFIXES = (".py", ".ipynb")
MAX_PY_BYTES = 4 * 2**20  # one .py submission


class EntryProblem(ValueError):
    """An entry that cannot be graded at all (the message says why): it costs only its own row."""


def __getattr__(name: str):
    """CSV_HEADER, on first use: the stages' names come from `course`, which imports torch, and
    a usage error must not wait for that."""
    if name == "CSV_HEADER":
        from course.registry import STAGES

        return ["student", "score", "max_score", *STAGES, "note", "similar_to",
                "similar_to_reference"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def entries(folder: Path) -> dict[str, Path]:
    """{student: entry}: every entry of `folder` named like a submission (a folder, a .ipynb, a .py;
    hidden ones and `_` ones skipped), whatever it is: one that cannot be graded (a link, a pipe,
    a device, too large) is read only when it is graded, and gets a row that says why."""
    found = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith((".", "_")):
            continue
        if path.suffix in SUFFIXES or path.is_dir():  # a link to a folder too: its row says why
            name = path.name if path.suffix not in SUFFIXES else path.stem
            found[path.name if name in found else name] = path  # alice/ and alice.py: both kept
    return found


_KINDS = ((stat.S_ISLNK, "a link (links are not followed)"), (stat.S_ISFIFO, "a pipe (FIFO)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
          (stat.S_ISDIR, "a folder"))


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes: never through a link, never waiting
    on a pipe, never reading more than `limit` (a sparse 1 GiB file is refused by its size)."""
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            raise EntryProblem(f"{path.name} is {_kind(mode)}, not a file")
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise EntryProblem(f"{path.name} cannot be opened ({exc.strerror})") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):  # replaced since the lstat
            raise EntryProblem(f"{path.name} is {_kind(info.st_mode)}, not a file")
        if info.st_size > limit:
            raise EntryProblem(f"{path.name} is {info.st_size / 2**20:.1f} MiB, over the limit of "
                               f"{limit / 2**20:.0f} MiB")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise EntryProblem(f"{path.name} is over the limit of {limit / 2**20:.0f} MiB")
    return data


def read_entry(entry: Path) -> tuple[dict[str, bytes], list[str]]:
    """({name: bytes} of what is graded, notes on what was skipped): a folder's notebooks (or its
    one .py), one .ipynb, or one .py (named `submission.py`: no name means anything). Everything
    is read from inside the entry, never through a link. EntryProblem when nothing can be."""
    from course.submissions.reader import MAX_NOTEBOOK_BYTES, MAX_NOTEBOOKS

    try:
        mode = os.lstat(entry).st_mode
    except OSError as exc:
        raise EntryProblem(f"it cannot be read ({exc.strerror})") from None
    if stat.S_ISREG(mode):
        if entry.suffix == ".py":
            return {"submission.py": _read_regular(entry, MAX_PY_BYTES)}, []
        return {entry.name: _read_regular(entry, MAX_NOTEBOOK_BYTES)}, []
    if not stat.S_ISDIR(mode):
        raise EntryProblem(f"it is {_kind(mode)}, not a submission")
    names = sorted(n for n in os.listdir(entry) if not n.startswith("."))
    notebooks = [n for n in names if n.endswith(".ipynb")]
    files, notes = {}, []
    if notebooks:
        for name in notebooks[:MAX_NOTEBOOKS]:
            try:
                files[name] = _read_regular(entry / name, MAX_NOTEBOOK_BYTES)
            except EntryProblem as exc:
                notes.append(f"{exc}: not graded")
        if not files:
            raise EntryProblem("none of its notebooks could be read (" + "; ".join(notes) + ")")
        return files, notes
    scripts = [n for n in names if n.endswith(".py")]
    if len(scripts) != 1:
        raise EntryProblem(f"the folder holds no notebook and {len(scripts)} .py files, not one")
    return {"submission.py": _read_regular(entry / scripts[0], MAX_PY_BYTES)}, []


def _digest(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name, data in sorted(files.items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def submission_digest(entry: Path) -> str:
    """A hash of what would be graded (names and bytes of the entry's files); for an entry that
    cannot be graded, a hash of why (never raises)."""
    try:
        return _digest(read_entry(entry)[0])
    except (EntryProblem, OSError) as exc:
        return hashlib.sha256(f"not graded: {exc}".encode()).hexdigest()


# ---- one submission (in a job process) ---------------------------------------------------------
_starter = _spare = None  # in a job process: a thread, and the future of the next sandbox


def _start_sandbox(memory_mb: int):
    from autograder.trusted.grader import START_TIMEOUT
    from autograder.trusted.sandbox import Sandbox
    from course.paths import ROOT

    sandbox = Sandbox(ROOT, "cpu", memory_mb, isolated=True)
    multiprocessing.util.Finalize(sandbox, sandbox.close, exitpriority=10)  # never left behind
    sandbox.start(START_TIMEOUT)
    return sandbox


def _take_sandbox(memory_mb: int, more: bool):
    """The sandbox started ahead (None if it could not start); start the next one if `more`
    submissions may come to this job."""
    global _spare
    sandbox = None
    if _spare is not None:
        try:
            sandbox = _spare.result()
        except Exception:  # the grading starts its own, and says why if that fails too
            sandbox = None
    _spare = _starter.submit(_start_sandbox, memory_mb) if more else None
    return sandbox


def _stop(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _warm(memory_mb: int) -> None:
    """A job process: one thread for torch, the whole trusted side imported once, and the first
    submission's sandbox started."""
    global _starter, _spare
    import torch

    from autograder.trusted.grader import _import_model_code, _import_trusted

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, _stop)  # the parent stops us: clean up the sandboxes first
    torch.set_num_threads(1)
    _starter = ThreadPoolExecutor(1)
    _spare = _starter.submit(_start_sandbox, memory_mb)
    _import_trusted()
    _import_model_code()  # a class is graded on every function


def grade_entry(student: str, entry: str, options: dict, more: bool = True) -> dict:
    """Grade one entry officially, from a private copy of its files; never raises (an entry that
    cannot be read, or a grader failure, is this student's row, with a note)."""
    from autograder.api import grade
    from instructor.classmates import definition_prints, graded_prints

    seed = secrets.randbelow(2**24) + 1000
    record = {"student": student, "entry": entry, "fingerprint": submission_digest(Path(entry)),
              "seed": seed, "score": 0.0, "max_score": 0.0, "isolation": "", "checks": [],
              "problems": [], "note": "", "prints": {}, "definitions": {}, "similarity": {}}
    private = tempfile.mkdtemp(prefix="batch-")  # only this student's files: no classmate in view
    try:
        files, notes = read_entry(Path(entry))
        record["fingerprint"] = _digest(files)
        folder = Path(private) / "submission"
        folder.mkdir()
        for name, data in files.items():
            (folder / name).write_bytes(data)
            os.chmod(folder / name, 0o644)
        os.chmod(private, 0o755)  # the sandbox's children run under their own user ids
        os.chmod(folder, 0o755)
        target, sandbox = str(folder), None
        if "submission.py" in files:  # its sandbox shows its folder: start one for it
            target = str(folder / "submission.py")
        else:
            sandbox = _take_sandbox(options["memory_mb"], more)
        graded = grade(target, seed=seed, official=True, sandbox=sandbox, **options)
        checks = list(graded["results"].values())
        record.update(score=graded["score"], max_score=graded["max_score"],
                      incomplete=graded["incomplete"],
                      isolation=graded["isolation"], problems=notes + [
                          p for p in [graded["load_failure"]] + graded["load_errors"] if p],
                      checks=[{k: c[k] for k in ("name", "stage", "score", "max_score", "status",
                                                 "output")} for c in checks],
                      prints=graded_prints(target, graded.get("judged")),
                      definitions=definition_prints(target),
                      similarity=graded["similarity"])
        record["note"] = short_note(record["problems"])
    except EntryProblem as exc:
        record.update(problems=[f"not graded: {exc}"], note=f"not graded: {exc}")
    except Exception:  # the grader itself failed on this entry: its row says so, in words; the
        traceback.print_exc()  # error itself is the instructor's, on stderr
        why = "the grader itself failed on this submission; the next run grades it again"
        record.update(score=0.0, max_score=0.0, isolation="", checks=[], problems=[],
                      incomplete=[why], note=why)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return record


def short_note(problems: list[str], shown: int = 3) -> str:
    """The CSV's note: the first `shown` problems with the submission, and how many more the
    feedback file lists; empty only for a submission read without a problem."""
    more = len(problems) - shown
    return "; ".join(problems[:shown]) + (f"; and {more} more in the feedback file" if more > 0
                                          else "")


# ---- the class ---------------------------------------------------------------------------------
def stage_scores(record: dict) -> dict[str, float]:
    from course.registry import STAGES

    scores = dict.fromkeys(STAGES, 0.0)
    for check in record["checks"]:
        if check["status"] != "skipped":
            scores[check["stage"]] = scores.get(check["stage"], 0.0) + check["score"]
    return scores


def feedback(record: dict) -> str:
    """What a student reads: the total, each stage, and every check with its diagnosis."""
    from autograder.trusted.grader import READ_PROBLEMS
    from autograder.trusted.report import escape

    out = io.StringIO()
    if record.get("incomplete"):
        out.write(f"{record['student']}: GRADING DID NOT COMPLETE: this is not your score; "
                  f"{'; '.join(map(escape, record['incomplete']))}\n")
        return out.getvalue()
    out.write(f"{record['student']}: {record['score']:g} / {record['max_score']:g} points\n")
    if record["isolation"]:
        out.write(f"{record['isolation']}; fresh inputs drawn with seed {record['seed']}\n")
    for problem in record["problems"]:
        out.write(f"note: {escape(problem)}\n")
    for check in record["checks"]:
        mark = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[check["status"]]
        out.write(f"\n{mark} {check['score']:g}/{check['max_score']:g}  {check['name']}\n")
        output, repeated, _ = check["output"].partition(READ_PROBLEMS)
        if repeated:  # the reading problems of a missing name: the notes above list them once
            output += " (see the notes above)"
        for line in escape(output).splitlines():
            out.write(f"    {line}\n")
    return out.getvalue()


def spreadsheet_safe(text: str) -> str:
    """A cell a spreadsheet shows as text, never runs as a formula."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r", " ") else text


def write_text(path: Path, text: str) -> None:
    """Replace `path` whole (a temporary file in the same folder, then a rename)."""
    handle = tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}-",
                                         delete=False, encoding="utf-8", newline="")
    with handle:
        handle.write(text)
    os.replace(handle.name, path)


def reference_cell(record: dict) -> str:
    """The CSV's flag of similarity to the reference: each flagged function, its share, the most
    similar honest share, and whether `--copies zero` zeroed it (the evidence is in the report)."""
    return "; ".join(f"{name} {found['share']:.0%} (honest work at most "
                     f"{found['honest_max']:.0%}{', zeroed' if found['zeroed'] else ''})"
                     for name, found in (record.get("similarity") or {}).items())


def write_csv(path: Path, records: list[dict], similar: dict[str, str]) -> None:
    """The grades: one row per student, with the note of an entry not (wholly) graded, the
    classmates whose work is near-identical (`similar`: {student: text}) and the graded functions
    flagged as similar to the reference (`reference_cell`); every text cell is spreadsheet-safe.
    A grading that did not complete has no number that could be read as a grade."""
    from autograder.trusted.report import escape
    from course.registry import STAGES

    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(__getattr__("CSV_HEADER"))
    for record in records:
        if record.get("incomplete"):  # no number that could be read as a grade
            writer.writerow([spreadsheet_safe(escape(record["student"])), "incomplete", "",
                             *("" for _ in STAGES),
                             spreadsheet_safe(escape("; ".join(record["incomplete"]))),
                             spreadsheet_safe(similar.get(record["student"], "")), ""])
            continue
        stages = stage_scores(record)
        writer.writerow([spreadsheet_safe(escape(record["student"])), f"{record['score']:g}",
                         f"{record['max_score']:g}", *(f"{stages[s]:g}" for s in STAGES),
                         spreadsheet_safe(escape(record.get("note", ""))),
                         spreadsheet_safe(similar.get(record["student"], "")),
                         spreadsheet_safe(escape(reference_cell(record)))])
    write_text(path, out.getvalue())


def similarity_report(records: list[dict]) -> tuple[dict[str, str], str]:
    """({student: "bob (2 functions)"}, the report text): pairs of students whose graded functions
    are near-identical (`instructor.classmates`), and each student's functions flagged as similar
    to the reference with their matched lines, for the instructor to review."""
    from autograder.trusted.report import escape
    from instructor.classmates import PAIR_FUNCTIONS, PAIR_THRESHOLD, similar_pairs

    pairs = similar_pairs({r["student"]: r.get("prints") or {} for r in records},
                          {r["student"]: r.get("definitions") or {} for r in records})
    column: dict[str, list[str]] = {}
    lines = [f"Pairs of students with at least {PAIR_FUNCTIONS} graded functions, or functions "
             f"under any names (\"mine ~ theirs\"), sharing at least {PAIR_THRESHOLD:.0%} of "
             "their code's fingerprints (names, messages, dead code, statement order and the "
             "release's given code do not count). A flag to review, not a penalty.", ""]
    for a, b, functions in pairs:
        column.setdefault(a, []).append(f"{b} ({len(functions)} functions)")
        column.setdefault(b, []).append(f"{a} ({len(functions)} functions)")
        shares = ", ".join(f"{name} {share:.0%}" for name, share in functions.items())
        lines.append(f"{escape(a)} and {escape(b)}: {shares}")
    if not pairs:
        lines.append("no such pair")
    lines += ["", "Graded functions more similar to the reference than any independent "
              "implementation measured (the reference's lines beside the student's). Evidence to "
              "review, not a penalty, unless --copies zero says zeroed.", ""]
    flagged = [r for r in records if r.get("similarity")]
    for record in flagged:
        lines.append(f"{escape(record['student'])}:")
        for found in record["similarity"].values():
            lines += [f"  {escape(line)}" for line in found["evidence"].split("\n")]
            lines += ["  zeroed (--copies zero)"] if found["zeroed"] else []
    if not flagged:
        lines.append("no such function")
    return {s: "; ".join(v) for s, v in column.items()}, "\n".join(lines) + "\n"


def stored(store: Path, student: str) -> dict | None:
    try:
        return json.loads((store / f"{student}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def grade_class(folder: Path, csv_path: Path, feedback_dir: Path, jobs: int, regrade: bool,
                options: dict) -> list[dict]:
    """Grade every entry not yet graded (all with `regrade`); returns every student's record."""
    from tqdm.auto import tqdm

    from autograder.trusted.results import write_results

    store = csv_path.with_name(csv_path.name + ".results")
    store.mkdir(exist_ok=True)
    feedback_dir.mkdir(parents=True, exist_ok=True)
    students = entries(folder)
    todo = {s: e for s, e in students.items() if regrade or (stored(store, s)
                                                             or {}).get("incomplete")
            or (stored(store, s) or {}).get("fingerprint") != submission_digest(e)}
    skipped = len(students) - len(todo)
    if skipped:
        print(f"{skipped} of {len(students)} already graded (kept; --regrade grades them again)")
    bar = tqdm(total=len(todo), desc="grading", unit="student", file=sys.stderr)
    started = time.monotonic()
    context = multiprocessing.get_context("spawn")  # never fork a process that holds torch
    pending = dict(todo)
    retried: set[str] = set()
    try:
        while pending:
            with ProcessPoolExecutor(jobs, mp_context=context, initializer=_warm,
                                     initargs=(options["memory_mb"],)) as pool:
                last = len(pending) - jobs  # the last `jobs` entries: no sandbox after them
                running = {pool.submit(grade_entry, s, str(e), options, i < last): s
                           for i, (s, e) in enumerate(pending.items())}
                while running:
                    try:
                        done, _ = wait(running, return_when=FIRST_COMPLETED)
                    except KeyboardInterrupt:  # stop now: what is half-graded is graded next time
                        processes = list((pool._processes or {}).values())
                        pool.shutdown(wait=False, cancel_futures=True)
                        for process in processes:  # their sandboxes die with them
                            process.terminate()
                        raise
                    for future in done:
                        student = running.pop(future)
                        try:
                            record = future.result()
                        except BrokenProcessPool:  # a job process died: retry its work once
                            if student in retried:
                                record = {"student": student, "entry": str(pending[student]),
                                          "fingerprint": "", "seed": 0, "score": 0.0,
                                          "max_score": 0.0, "isolation": "", "checks": [],
                                          "problems": [], "incomplete": [
                                              "the grader's job process died twice while "
                                              "grading this submission"],
                                          "note": "the grader's job process died twice"}
                            else:
                                retried.add(student)
                                continue
                        if record.get("incomplete") and student not in retried:
                            retried.add(student)  # an overloaded machine, most often: once
                            print(f"{student}: the grading did not complete; graded once more "
                                  "after the others")  # (the next round of `pending`)
                            continue
                        write_results(record, store / f"{student}.json")
                        write_text(feedback_dir / f"{student}.txt", feedback(record))
                        pending.pop(student)
                        bar.update()
    finally:
        bar.close()
    if todo:
        seconds = time.monotonic() - started
        print(f"graded {len(todo)} in {seconds:.0f} s ({seconds / len(todo):.1f} s per "
              f"submission, --jobs {jobs})")
    records = [stored(store, s) for s in students]
    return [r for r in records if r is not None]


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m instructor.batch",
                                     description="Grade every submission in DIR, officially.")
    parser.add_argument("dir", type=Path, metavar="DIR",
                        help="one entry per student: a notebooks folder, a .ipynb or a .py")
    parser.add_argument("--jobs", type=positive_int, default=1,
                        help="submissions graded at once (at most one per CPU core)")
    parser.add_argument("--csv", type=Path, required=True,
                        help="the grades: student,score,max_score, then one column per stage")
    parser.add_argument("--feedback", type=Path, default=None,
                        help="folder of one feedback file per student (default: <csv>.feedback/)")
    parser.add_argument("--regrade", action="store_true",
                        help="grade again the students whose grades are already stored")
    parser.add_argument("--probe-timeout", type=seconds, default=30.0,
                        help="seconds one call into a submission may take")
    parser.add_argument("--time-limit", type=seconds, default=600.0,
                        help="wall-clock seconds one submission's whole grading may take")
    parser.add_argument("--memory-mb", type=memory_mb, default=4096,
                        help="address space (MiB) a submission may use beyond the grader's own "
                             "libraries")
    parser.add_argument("--copies", default="flag", choices=COPIES, help=COPIES_HELP)
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        parser.error(f"DIR {args.dir}: no such folder")
    if not args.csv.parent.is_dir():
        parser.error(f"--csv {args.csv}: no such folder {args.csv.parent}")
    if args.csv.is_dir():
        parser.error(f"--csv {args.csv} is a folder")
    if args.csv.exists():
        with args.csv.open(encoding="utf-8", errors="replace") as handle:
            if handle.readline().strip() != ",".join(__getattr__("CSV_HEADER")):
                parser.error(f"--csv {args.csv} exists and was not written by this command: "
                             "choose another name (nothing was overwritten)")
    if problem := unwritable(args.csv, folder=False):
        parser.error(f"argument --csv: {problem}")
    feedback_dir = args.feedback or args.csv.with_name(args.csv.name + ".feedback")
    if feedback_dir.exists() and not feedback_dir.is_dir():
        parser.error(f"--feedback {feedback_dir} is a file, not a folder")
    if problem := unwritable(feedback_dir):
        parser.error(f"argument --feedback: {problem}")
    cores = len(os.sched_getaffinity(0))
    if args.jobs > cores:  # more would only queue for the cores, each holding a sandbox's memory
        print(f"--jobs {args.jobs} is more than the {cores} cores this process may use: grading "
              f"{cores} at once", file=sys.stderr)
        args.jobs = cores
    if not entries(args.dir):
        parser.error(f"DIR {args.dir} holds no submission (a folder, .ipynb or .py per student)")
    from autograder.trusted.isolation import sandbox_problem
    from course.paths import ROOT

    problem = sandbox_problem(ROOT)
    if problem:
        print(f"refusing to grade: an official grade needs the sandbox ({problem})",
              file=sys.stderr)
        return 4
    options = {"probe_timeout": args.probe_timeout, "time_limit": args.time_limit,
               "memory_mb": args.memory_mb, "copies": args.copies}
    try:
        records = grade_class(args.dir, args.csv, feedback_dir, args.jobs, args.regrade, options)
    except KeyboardInterrupt:
        print("\ninterrupted: the grades finished so far are kept; run the same command again "
              "to grade the rest", file=sys.stderr)
        return 130
    similar, report = similarity_report(records)
    write_csv(args.csv, records, similar)
    report_path = args.csv.with_name(args.csv.name + ".similar.txt")
    write_text(report_path, report)
    print(f"{len(records)} students: {args.csv} (feedback in {feedback_dir}/; similar work: "
          f"{len(similar)} students in {report_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
