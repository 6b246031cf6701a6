"""A pytest plugin for bench_suite.py: when each test ran, in which process, and the CPU it spent
in that process.

Each test's window is its whole protocol (setup, call, teardown) on the system-wide monotonic
clock, and its CPU in its own process (a pytest-xdist worker, or pytest itself) is read with
getrusage(RUSAGE_SELF) around it. bench_suite.py gives each process it sampled to the test that
was running in that process's ancestor (`attribute`): a `pytest autograder` CLI and the sandbox
template under it, a Jupyter kernel, a `course.train` run. Parent links are what /proc showed when
a process was first sampled, so a process that outlives its parent is still placed; one whose
ancestry leads to no test (a Docker container's processes, children of containerd) is outside.

bench_suite.py loads it with `-p benchmarks.cpu_by_test` and names the folder to write to in
BENCH_SUITE_TESTS; without that variable the plugin does nothing. Each process writes its own
file there, one line per test: nodeid, pid, start, end (monotonic s), CPU s in the process.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

FOLDER_VARIABLE = "BENCH_SUITE_TESTS"


@dataclass
class Span:
    nodeid: str
    pid: int  # the process it ran in
    start: float  # time.monotonic(), the same clock in every process
    end: float
    own: float  # CPU s in its process


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder:
        yield
        return
    start, own = time.monotonic(), _cpu()
    yield
    end, own = time.monotonic(), _cpu() - own
    nodeid = " ".join(item.nodeid.split())  # a parameter may hold tabs or newlines
    with (Path(folder) / f"{os.getpid()}.tsv").open("a", encoding="utf-8") as handle:
        handle.write(f"{nodeid}\t{os.getpid()}\t{start:.3f}\t{end:.3f}\t{own:.3f}\n")


def read_tests(folder: Path) -> list[Span]:
    """Every test of every file in `folder`, in the order each process ran them."""
    runs = []
    for path in sorted(folder.glob("*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            nodeid, pid, start, end, own = line.rsplit("\t", 4)
            runs.append(Span(nodeid, int(pid), float(start), float(end), float(own)))
    return runs


def running_at(runs: list[Span], pid: int, when: float) -> Span | None:
    """The test process `pid` was running at `when`, or had last started (a process is first
    sampled up to an interval after it started); None before its first test."""
    started = [run for run in runs if run.pid == pid and run.start <= when]
    return max(started, key=lambda run: run.start, default=None)


def attribute(runs: list[Span], processes: list[tuple[int, int, float, float]]) -> dict[str, float]:
    """{nodeid: CPU s of the processes started under it}: `processes` are (pid, parent pid, first
    seen, CPU s); each is given to the test its nearest ancestor among the tests' processes was
    running when it was first seen. A pid used twice is read as the process alive at the time."""
    testers = {run.pid for run in runs}
    by_pid: dict[int, list[tuple[float, int]]] = {}
    for pid, parent, first, _ in processes:
        by_pid.setdefault(pid, []).append((first, parent))
    spent: dict[str, float] = {}
    for pid, parent, first, cpu in processes:
        if pid in testers or cpu <= 0:
            continue
        seen = {pid}
        while parent not in testers and parent not in seen and parent in by_pid:
            seen.add(parent)
            earlier = [entry for entry in by_pid[parent] if entry[0] <= first] or by_pid[parent]
            parent = max(earlier)[1]
        run = running_at(runs, parent, first) if parent in testers else None
        if run is not None:
            spent[run.nodeid] = spent.get(run.nodeid, 0.0) + cpu
    return spent


def by_module(runs: list[Span], children: dict[str, float]) -> list[tuple[str, int, float, float]]:
    """[(test module, tests, CPU s in the tests' processes, CPU s in processes started under
    them)], the most CPU first."""
    modules: dict[str, list] = {}
    for run in runs:
        row = modules.setdefault(run.nodeid.split("::")[0], [0, 0.0, 0.0])
        row[0] += 1
        row[1] += run.own
        row[2] += children.get(run.nodeid, 0.0)
    return sorted(((m, n, own, spent) for m, (n, own, spent) in modules.items()),
                  key=lambda row: -(row[2] + row[3]))
