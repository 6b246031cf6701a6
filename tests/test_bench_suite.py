"""benchmarks/bench_suite.py: each process is counted under its kind, with only the CPU it spent
while the command ran, and the rows add up to the machine's busy time; each test is counted with
the CPU of its process and of the processes it waited for (benchmarks/cpu_by_test.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_suite  # noqa: E402
from bench_suite import CLI, UNSEEN, Seen, classify, main, sample, table_rows  # noqa: E402
from cpu_by_test import Span, attribute, by_module  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads Linux's /proc")

VENV = "/home/ada/grpo/.venv/bin/python3"


@pytest.mark.parametrize("argv, kind", [
    ([VENV, "-I", "-B", "/home/ada/grpo/autograder/untrusted/worker.py", "13", "/home/ada/grpo"],
     "sandbox template"),
    ([VENV, "-m", "ipykernel_launcher", "-f", "/tmp/kernel-1.json"], "Jupyter kernel"),
    ([VENV, "/home/ada/grpo/.venv/bin/pytest", "autograder", "--submission", "sub.py"], CLI),
    ([VENV, "-m", "pytest", "autograder", "-k", "tokenize"], CLI),
    ([VENV, "-u", "-c", "import sys;exec(eval(sys.stdin.readline()))"], "pytest-xdist worker"),
    ([VENV, "/home/ada/grpo/.venv/bin/pytest", "-n", "2", "tests/test_batch.py"], "pytest (the main"),
    ([VENV, "-B", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=8)"],
     "multiprocessing child"),
    ([VENV, "-m", "instructor.batch", "class/", "--csv", "g.csv"], "python -m instructor"),
    ([VENV, "-m", "nbgrader", "autograde", "ps1"], "nbgrader"),
    ([VENV, "-m", "course.train", "--steps", "2"], "python -m course.train"),
    (["/usr/sbin/dockerd"], "Docker"),
    ([VENV, "-c", "print(1)"], "other Python"),
    (["/usr/bin/bwrap", "--unshare-all"], "other"),
    (["tar", "-C", "/tmp/pytest-of-ada/pytest-3/docker-rootfs", "-c", "."], "other"),  # paths say nothing
    ([VENV, "-c", "open('/tmp/nbgrader_course/x')"], "other Python"),
])
def test_each_process_is_counted_under_its_kind(argv, kind):
    assert classify(argv).startswith(kind), classify(argv)


def test_a_child_is_counted_with_the_cpu_it_spent_and_a_running_process_only_from_the_start():
    table: dict = {}
    sample(table, time.monotonic(), before=True)  # this process ran long before: torch, pytest
    # a second of CPU, then a sleep: the samples during the sleep read its whole CPU time, however
    # long a busy machine keeps this sampler waiting
    burn = "import time\nwhile time.process_time() < 1.0: pass\ntime.sleep(1.5)"
    child = subprocess.Popen([sys.executable, "-c", burn])
    while child.poll() is None:
        sample(table, time.monotonic())
        time.sleep(0.02)
    started = time.process_time()
    while time.process_time() - started < 0.3:
        pass
    sample(table, time.monotonic())
    theirs = next(s for (pid, _), s in table.items() if pid == child.pid)
    assert theirs.kind == "other Python" and 0.95 <= theirs.spent <= 1.2, theirs
    mine = next(s for (pid, _), s in table.items() if pid == os.getpid())
    assert 0.25 <= mine.spent < mine.cpu, mine  # its CPU before the start is not counted


def test_rows_add_up_to_the_machine_and_the_largest_comes_first():
    table = {(1, "1"): Seen("Jupyter kernel", "k", 1, 9.0, 0, 1, before=1.0),
             (2, "2"): Seen(CLI, "c", 1, 3.0, 0, 1),
             (3, "3"): Seen(CLI, "c", 1, 4.0, 0, 1),
             (4, "4"): Seen("other", "idle", 1, 5.0, 0, 1, before=5.0)}
    rows = table_rows(table, busy=20.0)
    assert rows == [("Jupyter kernel", 1, 8.0), (CLI, 2, 7.0), (UNSEEN, 0, 5.0)]


def test_bad_flags_are_usage_errors_naming_the_flag_and_nothing_is_overwritten(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--interval", "0"])
    assert exit_info.value.code == 2 and "--interval" in capsys.readouterr().err
    kept = tmp_path / "procs.tsv"
    kept.write_text("an earlier run\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--profile", str(kept), "--", "true"])
    assert exit_info.value.code == 2 and "--profile" in capsys.readouterr().err
    assert kept.read_text() == "an earlier run\n"
    with pytest.raises(SystemExit) as exit_info:
        main(["--profile", str(tmp_path / "nowhere" / "procs.tsv"), "--", "true"])
    assert exit_info.value.code == 2 and "--profile" in capsys.readouterr().err


def test_main_refuses_tests_for_a_command_that_is_not_pytest(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--tests", str(tmp_path / "tests.tsv"), "--", "true"])
    assert exit_info.value.code == 2 and "--tests" in capsys.readouterr().err
    assert not (tmp_path / "tests.tsv").exists()


@pytest.mark.parametrize("command, loaded", [
    (["pytest", "-q"], ["pytest", "-p", "benchmarks.cpu_by_test", "-q"]),
    ([VENV, "-m", "pytest", "-n", "2"], [VENV, "-m", "pytest", "-p", "benchmarks.cpu_by_test", "-n", "2"]),
    (["/usr/bin/true"], None),
    ([VENV, "-m", "course.train"], None),
])
def test_the_plugin_is_loaded_where_the_command_runs_pytest(command, loaded):
    assert bench_suite.with_test_plugin(command) == loaded


def test_a_command_line_is_one_tsv_field():
    assert bench_suite.one_line("python -c 'import os\n\tprint(1)'") == "python -c 'import os print(1)'"


THREE_TESTS = """
import subprocess, sys, time

BURN = "import time\\nwhile time.process_time() < 0.6: pass\\ntime.sleep(0.4)"

def test_in_process():
    started = time.process_time()
    while time.process_time() - started < 0.6:
        pass

def test_in_a_child():
    subprocess.run([sys.executable, "-c", BURN], check=True)

def test_in_a_grandchild():
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN!r}], check=True)"
    subprocess.run([sys.executable, "-c", parent], check=True)

def test_nothing():
    pass
"""


def test_each_test_is_counted_in_its_process_and_in_the_processes_started_under_it(tmp_path, monkeypatch,
                                                                                   capsys):
    monkeypatch.setattr(bench_suite, "import_torch_seconds", lambda: 1.0)  # the machine line's
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the plugin writes
    (tmp_path / "test_three.py").write_text(THREE_TESTS)
    written = tmp_path / "tests.tsv"
    code = main(["--interval", "0.1", "--tests", str(written), "--", sys.executable, "-m", "pytest",
                 "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_three.py")])
    assert code == 0
    rows = {line.split("\t")[0].split("::")[1]: [float(x) for x in line.split("\t")[1:]]
            for line in written.read_text().splitlines()[1:]}
    assert set(rows) == {"test_in_process", "test_in_a_child", "test_in_a_grandchild", "test_nothing"}
    _, own, under = rows["test_in_process"]
    assert 0.55 <= own <= 1.0 and under == 0, rows
    for name in ("test_in_a_child", "test_in_a_grandchild"):
        _, own, under = rows[name]
        assert 0.55 <= under <= 1.2 and own < 0.3, rows
    assert rows["test_nothing"][2] == 0, rows
    table = capsys.readouterr().out
    assert "| test_three.py | 4 |" in table and "outside any test" in table
    assert list((tmp_path / "tmp").iterdir()) == []  # the plugin's folder is removed


def test_a_process_goes_to_the_test_its_ancestor_was_running_when_it_was_first_seen():
    runs = [Span("m.py::a", 10, 0.0, 5.0, 1.0), Span("m.py::b", 10, 5.0, 9.0, 2.0),
            Span("n.py::c", 20, 0.0, 9.0, 0.5)]
    processes = [(11, 10, 1.0, 3.0),   # a's child
                 (12, 11, 2.0, 4.0),   # its grandchild
                 (13, 10, 5.05, 6.0),  # started under b
                 (14, 13, 8.0, 1.5),   # b's grandchild, its parent still known
                 (21, 20, 3.0, 7.0),   # c's child
                 (30, 1, 2.0, 9.0),    # a daemon: no test's
                 (10, 2, 0.0, 50.0)]   # the worker itself: counted in its tests' own CPU
    assert attribute(runs, processes) == {"m.py::a": 7.0, "m.py::b": 7.5, "n.py::c": 7.0}
    assert by_module(runs, attribute(runs, processes)) == [("m.py", 2, 3.0, 14.5), ("n.py", 1, 0.5, 7.0)]
