"""Where the test suite's CPU goes: core-seconds by kind of process, and the machine it ran on.

Runs a command in the repository's root (by default the README's test command) and samples /proc every `--interval`
seconds: each process's own CPU time (utime + stime, Linux's /proc/PID/stat), grouped by what the
process is (a sandbox template and its stage children, a Jupyter kernel, a `pytest autograder`
CLI, a pytest-xdist worker, ...). The whole machine's busy time over the run (/proc/stat) is the
total; what the samples missed (processes that lived less than an interval, the CPU a process
spent after its last sample, kernel threads) is its own row, so the rows add up to the total.

The suite is CPU-bound on a small machine, so its wall time is about its core-seconds divided by
the cores, and a machine's speed moves both. The machine line therefore carries a reference any
machine can repeat: the CPU time of `python -c "import torch"` (median of 3), which every
process that grades, trains or runs a notebook pays first.

Usage (Linux only):
    python benchmarks/bench_suite.py                        # the README's `pytest -n 2 --dist loadscope`
    python benchmarks/bench_suite.py --profile procs.tsv -- pytest -m "not slow" -n 2 --dist loadscope
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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
        table[key] = Seen(classify(argv), " ".join(argv), cpu, now, now, cpu if before else 0.0)


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


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=seconds, default=0.5, help="seconds between samples")
    parser.add_argument("--profile", type=Path, help="also write every process seen, as TSV")
    parser.add_argument("command", nargs="*", help="after --: the command (default: the README's)")
    args = parser.parse_args(argv)
    if not Path("/proc/stat").exists():
        parser.error("needs Linux's /proc")
    if args.profile and args.profile.exists():
        parser.error(f"--profile {args.profile} exists: nothing is overwritten")
    if args.profile and not args.profile.parent.is_dir():
        parser.error(f"--profile {args.profile}: no folder {args.profile.parent}")
    load = os.getloadavg()[0]
    try:
        torch_seconds = import_torch_seconds()
    except subprocess.CalledProcessError:
        parser.error(f"`import torch` fails in {sys.executable}: install the project first")
    print(f"machine: {describe_machine(torch_seconds, load)}", flush=True)
    table: dict = {}
    started, busy_before = time.monotonic(), busy_seconds()
    sample(table, started, before=True)
    try:
        child = subprocess.Popen(args.command or DEFAULT_COMMAND, cwd=ROOT)
    except OSError as exc:
        parser.error(f"command {args.command[0]!r}: {exc.strerror}")
    try:
        while child.poll() is None:
            sample(table, time.monotonic())
            time.sleep(args.interval)
    except KeyboardInterrupt:  # Ctrl-C reached the command too: the table of what ran so far
        child.wait()
    wall, busy = time.monotonic() - started, busy_seconds() - busy_before
    for (pid, _), seen in table.items():
        if pid == os.getpid():
            seen.kind = SAMPLER
    print_table(table_rows(table, busy), wall, busy, child.returncode)
    if args.profile:
        with args.profile.open("x") as handle:
            handle.write("pid\tkind\tcore_s\tfirst_s\tlast_s\tcommand\n")
            for (pid, _), seen in sorted(table.items(), key=lambda item: item[1].first):
                if seen.spent > 0:
                    handle.write(f"{pid}\t{seen.kind}\t{seen.spent:.2f}\t{seen.first - started:.1f}\t"
                                 f"{seen.last - started:.1f}\t{seen.command[:300]}\n")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
