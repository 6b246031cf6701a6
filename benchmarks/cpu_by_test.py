"""A pytest plugin for bench_suite.py: the CPU each test spent, in its own process and in the
processes it started and waited for.

Each test's CPU is read around its whole protocol (setup, call, teardown) with getrusage(2):
RUSAGE_SELF for what ran in the test's process (a pytest-xdist worker, or pytest itself), and
RUSAGE_CHILDREN for the processes that ended and were waited for meanwhile, with everything they
waited for in turn (a `pytest autograder` CLI and its sandbox template, a Jupyter kernel, a
`course.train` run). What a test's process does not wait for is not its own: a Docker
container's processes (children of containerd), a process a subreaper took over, a fixture's
process that ends after the test (counted to the test whose teardown ends it).

bench_suite.py loads it with `-p benchmarks.cpu_by_test` and names the folder to write to in
BENCH_SUITE_TESTS; without that variable the plugin does nothing. Each process writes its own
file there, one line per test: nodeid, wall seconds, CPU in the process, CPU in children.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest

FOLDER_VARIABLE = "BENCH_SUITE_TESTS"


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder:
        yield
        return
    wall, own, children = time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    yield
    wall, own = time.monotonic() - wall, _cpu(resource.RUSAGE_SELF) - own
    children = _cpu(resource.RUSAGE_CHILDREN) - children
    nodeid = item.nodeid.replace("\t", " ").replace("\n", " ")  # a parameter may hold either
    with (Path(folder) / f"{os.getpid()}.tsv").open("a", encoding="utf-8") as handle:
        handle.write(f"{nodeid}\t{wall:.3f}\t{own:.3f}\t{children:.3f}\n")


def read_tests(folder: Path) -> list[tuple[str, float, float, float]]:
    """[(nodeid, wall s, CPU s in its process, CPU s in its children)] of every file in `folder`."""
    rows = []
    for path in sorted(folder.glob("*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            nodeid, wall, own, children = line.rsplit("\t", 3)
            rows.append((nodeid, float(wall), float(own), float(children)))
    return rows


def by_module(tests: list[tuple[str, float, float, float]]) -> list[tuple[str, int, float, float]]:
    """[(test module, tests, CPU s in process, CPU s in children)], the most CPU first."""
    modules: dict[str, list] = {}
    for nodeid, _wall, own, children in tests:
        row = modules.setdefault(nodeid.split("::")[0], [0, 0.0, 0.0])
        row[0] += 1
        row[1] += own
        row[2] += children
    return sorted(((m, n, own, children) for m, (n, own, children) in modules.items()),
                  key=lambda row: -(row[2] + row[3]))
