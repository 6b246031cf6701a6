"""Where the test suite's CPU goes: core-seconds by kind of process, and the machine it ran on.

Runs a command in the repository's root (by default the README's test command) and samples /proc every `--interval`
seconds: each process's own CPU time (utime + stime, Linux's /proc/PID/stat), grouped by what the
process is (a sandbox template and its stage children, a Jupyter kernel, a `pytest autograder`
CLI, a pytest-xdist worker, ...). The whole machine's busy time over the run (/proc/stat) is the
total; what the samples missed (processes that lived less than an interval, the CPU a process
spent after its last sample, kernel threads) is its own row, so the rows add up to the total.

Where the command runs pytest, a second table gives the core-seconds by test module: each test's
in its own process, and in the processes started under it (`cpu_by_test.py`, a plugin loaded with
`-p benchmarks.cpu_by_test`, says when each test ran in which process; a sampled process goes to
the test its ancestor was running; the suite's processes see the repository on PYTHONPATH, where
the project's editable install puts it anyway). `--tests FILE` writes every test's.

The suite is CPU-bound on a small machine, so its wall time is about its core-seconds divided by
the cores, and a machine's speed moves both. The machine line therefore carries a reference any
machine can repeat: the CPU time of `python -c "import torch"` (median of 3), which every
process that grades, trains or runs a notebook pays first.

Usage (Linux only):
    python benchmarks/bench_suite.py                        # the README's `pytest -n 2 --dist loadscope`
    python benchmarks/bench_suite.py --profile procs.tsv -- pytest -m "not slow" -n 2 --dist loadscope
    python benchmarks/bench_suite.py --tests tests.tsv      # and every test's core-seconds
"""

from __future__ import annotations

import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cpu_by_test import FOLDER_VARIABLE, Span, attribute, by_module, read_tests
from machine import cpu_model

from autograder.options import Parser, seconds

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_COMMAND = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadscope", "-q"]
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# (what the command line holds, the kind), first match wins: a stage child is forked from its
# template and keeps its command line, so the two are one kind
KINDS = (
    ("autograder/untrusted/worker.py", "sandbox template and its stage children"),
    ("-m ipykernel_launcher", "Jupyter kernel"),
    ("exec(eval(sys.stdin.readline()))", "pytest-xdist worker (tests run in process)"),
    ("spawn_main(", "multiprocessing child (batch jobs, data-parallel ranks)"),
    ("-m instructor.", "python -m instructor.* (batch, release, gradescope)"),
    ("-m nbgrader", "nbgrader"),
    ("-m course.train", "python -m course.train"),
    ("benchmarks/bench_", "benchmark script"),
)
DOCKER = ("docker", "containerd", "runc")  # the programs' names begin so
CLI = "pytest autograder (the grading CLI)"
SAMPLER = "this sampler (bench_suite.py)"
TOP_MODULES = 15  # rows of the test-module table; the others are one row
UNSEEN = "not seen by a sample (short-lived processes, kernel threads, CPU after a last sample)"


def classify(argv: list[str]) -> str:
    """The kind of a process, from its command line (`/proc/PID/cmdline`, split at NULs)."""
    words = [Path(a).name for a in argv]
    for i, word in enumerate(words[:-1]):
        if word in ("pytest", "py.test") and words[i + 1] == "autograder":
            return CLI
    line = " ".join(argv)
    for needle, kind in KINDS:
        if needle in line:
            return kind
    program = words[:2] if words and words[0].startswith("python") else words[:1]
    if any(word in ("pytest", "py.test", "nbgrader") for word in program) or "-m pytest" in line:
        return "nbgrader" if "nbgrader" in program else "pytest (the main process)"
    if words and words[0].startswith(DOCKER):
        return "Docker (daemon, build, containers)"
    if program and program[0].startswith("python"):
        return "other Python"
    return "other"


@dataclass
class Seen:
    kind: str
    command: str
    parent: int  # its parent pid when first sampled
    cpu: float  # seconds of CPU at the last sample
    first: float
    last: float
    before: float = 0.0  # its CPU when the command started (a process that was already running)

    @property
    def spent(self) -> float:
        return self.cpu - self.before


def sample(table: dict[tuple[int, str], Seen], now: float, before: bool = False) -> None:
    """Add every process of /proc to `table` (keyed by pid and start time, so a reused pid is a
    new entry), or update its CPU time. `before`: the processes running before the command, whose
    CPU until now is not the command's."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                stat = handle.read()
            fields = stat[stat.rindex(")") + 2:].split()  # the name in parentheses may hold spaces
            cpu = (int(fields[11]) + int(fields[12])) / TICKS
            key = (int(name), fields[19])
            if key in table:
                table[key].cpu, table[key].last = cpu, now
                continue
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                argv = [a.decode(errors="replace") for a in handle.read().split(b"\0") if a]
        except (OSError, ValueError, IndexError):
            continue  # it ended while we read it
        table[key] = Seen(classify(argv), " ".join(argv), int(fields[1]), cpu, now, now,
                          cpu if before else 0.0)


def one_line(command: str) -> str:
    """A command line as one TSV field (a `python -c` program may hold tabs and newlines)."""
    return " ".join(command.split())


def busy_seconds() -> float:
    """The whole machine's busy CPU time so far (/proc/stat: user, nice, system, irq, softirq, steal)."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / TICKS


def import_torch_seconds(runs: int = 3) -> float:
    """Median CPU time (user + system) of `python -c "import torch"`: the machine's speed at the
    cost every grading, training and notebook process pays first."""
    times = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(times)


def describe_machine(torch_seconds: float, load: float) -> str:
    return (f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average {load:.1f} at the start, "
            f"`import torch` {torch_seconds:.2f} core-s")


def table_rows(table: dict, busy: float) -> list[tuple[str, int, float]]:
    """[(kind, processes, core-s)], most CPU first, and the unseen remainder last."""
    kinds: dict[str, list] = {}
    for seen in table.values():
        row = kinds.setdefault(seen.kind, [0, 0.0])
        row[0] += 1
        row[1] += seen.spent
    rows = sorted(((k, n, cpu) for k, (n, cpu) in kinds.items() if cpu >= 0.05),
                  key=lambda row: -row[2])
    return rows + [(UNSEEN, 0, max(0.0, busy - sum(cpu for _, _, cpu in rows)))]


def print_table(rows: list[tuple[str, int, float]], wall: float, busy: float, code: int) -> None:
    print(f"\nexit status {code}; wall {wall:.0f} s; the machine busy {busy:.0f} core-s "
          f"({busy / wall / (os.cpu_count() or 1):.0%} of {os.cpu_count()} cores)\n")
    print("| process | processes | core-s | share |")
    print("|---|---|---|---|")
    for kind, count, cpu in rows:
        print(f"| {kind} | {count or ''} | {cpu:.1f} | {cpu / busy:.0%} |")


def with_test_plugin(command: list[str]) -> list[str] | None:
    """`command` with `cpu_by_test` loaded, where it runs pytest (`pytest ...`, `python -m pytest
    ...`); None where it does not."""
    words = [Path(a).name for a in command]
    if words[:1] in (["pytest"], ["py.test"]):
        at = 1
    elif words[:1] and words[0].startswith("python") and words[1:3] == ["-m", "pytest"]:
        at = 3
    else:
        return None
    return command[:at] + ["-p", "benchmarks.cpu_by_test"] + command[at:]


def print_modules(modules: list[tuple[str, int, float, float]], busy: float) -> None:
    """The core-seconds by test module (`cpu_by_test.by_module`), the most first; the rest of the
    machine's busy time is outside any test (start-up, collection, Docker's containers, processes
    too short to sample)."""
    shown, others = modules[:TOP_MODULES], modules[TOP_MODULES:]
    if others:
        shown.append((f"{len(others)} other modules", sum(m[1] for m in others),
                      sum(m[2] for m in others), sum(m[3] for m in others)))
    print("\n| test module | tests | core-s in its process | in processes started under it | share |")
    print("|---|---|---|---|---|")
    for module, count, own, children in shown:
        print(f"| {module} | {count} | {own:.1f} | {children:.1f} | {(own + children) / busy:.0%} |")
    outside = max(0.0, busy - sum(own + children for _, _, own, children in modules))
    print(f"| outside any test (start-up, collection, containers, processes too short to sample) | | "
          f"{outside:.1f} | | {outside / busy:.0%} |")


def _new_file(parser: Parser, flag: str, path: Path | None) -> None:
    """A file this run writes: never one that exists, and in a folder that does."""
    if path and path.exists():
        parser.error(f"{flag} {path} exists: nothing is overwritten")
    if path and not path.parent.is_dir():
        parser.error(f"{flag} {path}: no folder {path.parent}")


def run_sampled(parser: Parser, command: list[str], tests_folder: Path | None,
                interval: float) -> tuple[int, float, float, dict]:
    """Run `command` in the repository's root, sampling /proc every `interval` seconds, with
    `cpu_by_test` writing into `tests_folder` where one is given. Returns (exit status, wall s,
    the machine's busy core-s, {(pid, start): Seen})."""
    env = dict(os.environ)
    if tests_folder:
        env[FOLDER_VARIABLE] = str(tests_folder)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    table: dict = {}
    started, busy_before = time.monotonic(), busy_seconds()
    sample(table, started, before=True)
    try:
        child = subprocess.Popen(command, cwd=ROOT, env=env)
    except OSError as exc:
        parser.error(f"command {command[0]!r}: {exc.strerror}")
    try:
        while child.poll() is None:
            sample(table, time.monotonic())
            time.sleep(interval)
    except KeyboardInterrupt:  # Ctrl-C reached the command too: the table of what ran so far
        child.wait()
    for (pid, _), seen in table.items():
        if pid == os.getpid():
            seen.kind = SAMPLER
    return child.returncode, time.monotonic() - started, busy_seconds() - busy_before, table


def write_tests(path: Path, runs: list[Span], children: dict[str, float]) -> None:
    with path.open("x") as handle:
        handle.write("test\twall_s\tcore_s_in_process\tcore_s_under_it\n")
        for run in sorted(runs, key=lambda run: -(run.own + children.get(run.nodeid, 0.0))):
            handle.write(f"{run.nodeid}\t{run.end - run.start:.2f}\t{run.own:.2f}\t"
                         f"{children.get(run.nodeid, 0.0):.2f}\n")


def write_profile(path: Path, table: dict) -> None:
    with path.open("x") as handle:
        handle.write("pid\tkind\tcore_s\tfirst_s\tlast_s\tcommand\n")
        first = min(seen.first for seen in table.values())
        for (pid, _), seen in sorted(table.items(), key=lambda item: item[1].first):
            if seen.spent > 0:
                handle.write(f"{pid}\t{seen.kind}\t{seen.spent:.2f}\t{seen.first - first:.1f}\t"
                             f"{seen.last - first:.1f}\t{one_line(seen.command)[:300]}\n")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=seconds, default=0.5, help="seconds between samples")
    parser.add_argument("--profile", type=Path, help="also write every process seen, as TSV")
    parser.add_argument("--tests", type=Path, help="also write every test's core-seconds, as TSV "
                        "(where the command runs pytest)")
    parser.add_argument("command", nargs="*", help="after --: the command (default: the README's)")
    args = parser.parse_args(argv)
    if not Path("/proc/stat").exists():
        parser.error("needs Linux's /proc")
    _new_file(parser, "--profile", args.profile)
    _new_file(parser, "--tests", args.tests)
    plugged = with_test_plugin(args.command or DEFAULT_COMMAND)
    if args.tests and plugged is None:
        parser.error("--tests: the command does not run pytest")
    load = os.getloadavg()[0]
    try:
        torch_seconds = import_torch_seconds()
    except subprocess.CalledProcessError:
        parser.error(f"`import torch` fails in {sys.executable}: install the project first")
    print(f"machine: {describe_machine(torch_seconds, load)}", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="bench-suite-tests-")) if plugged else None
    try:
        code, wall, busy, table = run_sampled(parser, plugged or args.command or DEFAULT_COMMAND,
                                              folder, args.interval)
        runs = read_tests(folder) if folder else []
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    print_table(table_rows(table, busy), wall, busy, code)
    children = attribute(runs, [(pid, seen.parent, seen.first, seen.spent)
                                for (pid, _), seen in table.items()])
    if runs:
        print_modules(by_module(runs, children), busy)
    if args.tests:
        write_tests(args.tests, runs, children)
    if args.profile:
        write_profile(args.profile, table)
    return code


if __name__ == "__main__":
    sys.exit(main())
