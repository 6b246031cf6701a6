"""The sandbox from the outside: what the worker can see, usage errors, practice grades, and load.

The attacks themselves are in tests/redteam/ (see tests/test_redteam.py); here are the promises
that are not an attack: a missing --submission is a usage error, a machine without bubblewrap
gives a PRACTICE grade (and `--official` refuses), and correct work keeps full marks while four
gradings and two busy processes share two cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autograder.api import grade
from autograder.trusted.diskwatch import BUDGET
from autograder.trusted.isolation import bwrap_command, isolation_tier, sandbox_problem

ROOT = Path(__file__).resolve().parent.parent
needs_sandbox = pytest.mark.skipif(sandbox_problem(ROOT) is not None,
                                   reason=f"no sandbox here: {sandbox_problem(ROOT)}")


def _cli(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "autograder", *args, "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_a_missing_submission_is_a_usage_error_and_no_grade(tmp_path):
    missing, results = tmp_path / "nowhere" / "work.ipynb", tmp_path / "results.json"
    run = _cli("--submission", str(missing), "--results", str(results))
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
    assert str(missing) in run.stderr
    assert not results.exists()  # a refusal writes no score that could pass for a grade
    with pytest.raises(FileNotFoundError, match="nowhere"):
        grade(str(missing))


def test_without_bubblewrap_the_grade_is_practice_and_official_refuses(tmp_path):
    """PATH without bwrap and bubblewrap asked for: the grader says PRACTICE in the table and
    results.json, and an --official run stops with a usage error before grading anything; it
    never falls back to tier 2 unasked."""
    env = {**os.environ, "PATH": str(tmp_path)}
    results = tmp_path / "results.json"
    refused = _cli("--submission", "course", "--official", "--isolation", "bubblewrap",
                   "--results", str(results), env=env)
    assert refused.returncode == 4 and "refusing to grade without isolation" in refused.stderr
    assert "bubblewrap is not installed" in refused.stderr and not results.exists()
    practice = _cli("--submission", "course", "-k", "compute_entropy", "--results", str(results),
                    "--isolation", "bubblewrap", env=env)
    assert practice.returncode == 0, practice.stdout[-3000:]
    assert "PRACTICE grade" in practice.stdout
    document = json.loads(results.read_text())
    assert document["extra_data"]["practice"] is True and "PRACTICE grade" in document["output"]
    assert document["extra_data"]["isolation_tier"] is None and "practice" not in document


@needs_sandbox
def test_the_sandbox_shows_no_project_no_fixtures_no_network_and_no_grader():
    probe = """
import os, socket, sys
root = sys.argv[1]
seen = {"course": os.path.exists(os.path.join(root, "course")),
        "fixtures": os.listdir(os.path.join(root, "autograder", "fixtures")),
        "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1); seen["network"] = True
except OSError:
    seen["network"] = False
for path in (os.path.join(root, "autograder", "x"), "/usr/x"):
    try:
        open(path, "w"); seen[path] = "written"
    except OSError:
        seen[path] = "refused"
print(repr(seen))
"""
    done = subprocess.run(bwrap_command(ROOT) + [sys.executable, "-I", "-B", "-c", probe, str(ROOT)],
                          capture_output=True, text=True, timeout=120)
    seen = eval(done.stdout)  # our own probe's repr
    assert seen["course"] is False and seen["fixtures"] == [] and seen["network"] is False
    assert max(seen["processes"]) < 10  # its own PID namespace: the grader is not there
    assert set(v for k, v in seen.items() if k.startswith("/")) == {"refused"}


def test_the_tier_is_chosen_named_and_never_changed_silently():
    """`isolation_tier`: the first tier of the choice that holds, else (None, why each does not);
    an unknown choice is an error naming the option."""
    with pytest.raises(ValueError, match="--isolation 'docker'"):
        isolation_tier(ROOT, "docker")
    for choice, tiers in (("bubblewrap", {"bubblewrap"}), ("landlock", {"landlock-seccomp"}),
                          ("auto", {"bubblewrap", "landlock-seccomp"})):
        tier, why = isolation_tier(ROOT, choice)
        assert (tier in tiers and why is None) or (tier is None and why), (choice, tier, why)
    if isolation_tier(ROOT, "bubblewrap")[0]:
        assert isolation_tier(ROOT, "auto")[0] == "bubblewrap"


@pytest.mark.skipif(sandbox_problem(ROOT, "landlock") is not None,
                    reason=f"no tier 2 here: {sandbox_problem(ROOT, 'landlock')}")
def test_tier_2_confines_a_child_as_it_must():
    """The tier-2 self-test, run as a stage child would be (nobody, Landlock, seccomp): it writes
    its own folder only, cannot read the grader's files (mode 0644 here: Landlock refuses), opens
    no AF_INET socket, makes no namespace; and the grader's own folder is 0700."""
    import tempfile

    from autograder.trusted.sandbox import Sandbox

    private = tempfile.mkdtemp()
    os.chown(private, 65534, 65534)
    secret = ROOT / "autograder" / "fixtures" / "expected.pt"
    assert secret.stat().st_mode & 0o004  # readable by modes alone: Landlock is what refuses
    try:
        done = subprocess.run([sys.executable, "-I", "-B", str(ROOT / "autograder" / "untrusted" /
                                                              "confine.py"), "--check", private,
                               str(secret)], capture_output=True, text=True, timeout=120,
                              user=65534, group=65534, extra_groups=[])
    finally:
        shutil.rmtree(private, ignore_errors=True)
    seen = json.loads(done.stdout)
    assert seen["abi"] >= 1 and seen["write_private"] and seen["fork"]
    assert not (seen["read_forbidden"] or seen["inet_socket"] or seen["unix_socket"]
                or seen["unshare"]), seen
    box = Sandbox(ROOT, "cpu", 256, isolated=True, tier="landlock-seccomp")
    try:
        assert os.stat(box.private).st_mode & 0o777 == 0o700
        assert os.stat(box.stages).st_mode & 0o777 == 0o711  # traversable, not listable
    finally:
        box.close()


@pytest.mark.slow  # the fast lane's heaviest sandbox tests, with the memory bound's below
@pytest.mark.skipif(sandbox_problem(ROOT, "landlock") is not None,
                    reason=f"no tier 2 here: {sandbox_problem(ROOT, 'landlock')}")
def test_tier_2_grades_the_data_parallel_check_on_ranks_connected_before_the_submission():
    """Tier 2 has no network namespace: the gloo ranks connect before the submission loads and
    then lose TCP (`autograder.untrusted.ranks`), and the check is graded, not skipped: the
    reference and an independent implementation pass it, the no-world-scale mutant fails it."""
    cases = Path(__file__).with_name("autograder_cases")
    jobs = {"reference": "course", "independent": str(cases / "alt_full.py"),
            "mutant": str(cases / "mutant_ddp_no_world_scale.py")}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(grade, path, ("grpo_train_step",), official=True,
                                    isolation="landlock") for key, path in jobs.items()}
        graded = {key: future.result() for key, future in futures.items()}
    data_parallel = {key: next(r for n, r in g["results"].items() if "data-parallel" in n)
                     for key, g in graded.items()}
    for key in ("reference", "independent"):
        assert graded[key]["isolation_tier"] == "landlock-seccomp"
        assert graded[key]["score"] == graded[key]["max_score"] > 0, data_parallel[key]["output"]
    assert data_parallel["mutant"]["score"] == 0 and data_parallel["mutant"]["status"] == "failed"
    assert "world size" in data_parallel["mutant"]["output"]


@pytest.mark.slow
@pytest.mark.parametrize("tier", ("bubblewrap", "landlock"))
def test_one_memory_bound_holds_over_all_processes_of_a_grading(tier):
    """Six forked processes of 200 MiB each under --memory-mb 256: each is under its own address
    space limit, so only a bound over the whole grading (a memory cgroup) stops them; the OOM
    killer then takes some (SIGKILL), and the note says what bounded the grading."""
    from autograder.trusted import memory

    if sandbox_problem(ROOT, tier):
        pytest.skip(f"no {tier} sandbox here: {sandbox_problem(ROOT, tier)}")
    probe, why = memory.create(f"autograder-probe-{os.getpid()}")
    if probe is None:
        pytest.skip(f"no memory cgroup for the grader here: {why}")
    memory.remove(probe)
    graded = grade(str(ROOT / "tests" / "autograder_cases" / "attack_memory_many_processes.py"),
                   ("compute_entropy",), memory_mb=256, isolation=tier, probe_timeout=30.0)
    output = next(iter(graded["results"].values()))["output"]
    statuses = [int(s) for s in output.split("statuses of the six: [")[1].split("]")[0].split(",")]
    assert statuses.count(9) >= 1, output
    assert "by a memory cgroup of" in graded["isolation"]


def test_a_sandbox_start_that_times_out_is_retried_then_called_overload(monkeypatch):
    """Under load the first start may time out: it is retried (and then grades normally); two
    timeouts say "the grader is overloaded", never that the student's code crashed."""
    from autograder.trusted import sandbox
    from autograder.trusted.sandbox import WorkerError

    real_start, starts = sandbox.Sandbox.start, []

    def slow_once(self, timeout):
        starts.append(timeout)
        if len(starts) == 1:
            raise WorkerError("overloaded", "the grader is overloaded: its sandbox did not answer "
                                            f"within {timeout:.0f} s while starting")
        return real_start(self, timeout)

    monkeypatch.setattr(sandbox.Sandbox, "start", slow_once)
    retried = grade("course", ("compute_entropy",))
    assert len(starts) == 2 and starts[1] > starts[0]
    assert retried["score"] == retried["max_score"] > 0 and not retried["load_failure"]

    def always_slow(self, timeout):
        raise WorkerError("overloaded", f"the grader is overloaded: its sandbox did not answer "
                                        f"within {timeout:.0f} s while starting")

    monkeypatch.setattr(sandbox.Sandbox, "start", always_slow)
    failed = grade("course", ("compute_entropy",))
    assert failed["score"] == 0 and "the grader is overloaded" in failed["load_failure"]
    assert failed["load_failure"] in failed["incomplete"]  # no grade: nothing was judged
    assert "says nothing about your code" in failed["load_failure"]
    assert all("overloaded" in r["output"] for r in failed["results"].values())


def _stop_the_sandbox_at(calls: set, monkeypatch) -> list:
    """Fault injection: the sandbox's answers numbered in `calls` (counted from 1, "starting a
    worker" and "ending a worker" alike) time out, exactly as `Sandbox._reply` times out on an
    overloaded machine (the sandbox is closed, WorkerError "overloaded"). Returns the count."""
    from autograder.trusted import sandbox
    from autograder.trusted.sandbox import WorkerError

    real, seen = sandbox.Sandbox._reply, []

    def reply(self, timeout, doing):
        if doing != "starting":
            seen.append(doing)
            if len(seen) in calls:
                self.close(keep_folder=True)
                raise WorkerError("overloaded", "the grader is overloaded: its sandbox did not "
                                                f"answer within {timeout:.0f} s while {doing}")
        return real(self, timeout, doing)

    monkeypatch.setattr(sandbox.Sandbox, "_reply", reply)
    return seen


@needs_sandbox
def test_a_sandbox_that_stops_answering_mid_grading_is_restarted_and_the_check_retried(
        monkeypatch):
    """The sandbox times out while it starts the second stage's child (the third answer: fork,
    reap, fork): a fresh sandbox is started and the check run again, and the reference keeps full
    marks; no later check meets a closed sandbox."""
    seen = _stop_the_sandbox_at({3}, monkeypatch)
    graded = grade("course", ("compute_entropy", "tokenize_prompt_and_output"), official=True)
    failed = {n: r["output"] for n, r in graded["results"].items() if r["status"] != "passed"}
    assert len(seen) > 3 and not graded["incomplete"], graded["incomplete"]
    assert graded["score"] == graded["max_score"] > 0, failed


@needs_sandbox
def test_a_sandbox_that_keeps_stopping_makes_the_grading_incomplete_in_plain_words(monkeypatch):
    """Every answer after the first fork times out: two restarts, then the grading is incomplete,
    and neither the checks nor the reason hold Python's words for an error."""
    _stop_the_sandbox_at(set(range(2, 100)), monkeypatch)
    graded = grade("course", ("compute_entropy", "tokenize_prompt_and_output"), official=True)
    said = " ".join(graded["incomplete"] + [r["output"] for r in graded["results"].values()])
    assert graded["incomplete"] and "stopped answering 3 times" in said, said
    assert "says nothing about your code" in said
    for python_words in ("Error", "Traceback", "NoneType", "Exception"):
        assert python_words not in said, said


@needs_sandbox
def test_a_probe_that_times_out_once_is_run_again_and_the_grade_completes(monkeypatch):
    """Fault injection: the first answer of a probe "times out" (its child is ended, exactly as
    `StageClient._read` does when its deadline passes); the check runs again on a fresh child, and
    the reference keeps full marks. A probe that always times out still fails, saying so."""
    from autograder.trusted import sandbox
    from autograder.trusted.sandbox import WorkerError

    real, reads = sandbox.StageClient._read, []

    def times_out(self, timeout, doing, always=False):
        if doing.startswith("running"):
            reads.append(doing)
            if len(reads) == 1 or always:
                self.kill()
                raise WorkerError("timeout", f"timed out after {timeout:.0f} s while {doing}")
        return real(self, timeout, doing)

    monkeypatch.setattr(sandbox.StageClient, "_read", times_out)
    graded = grade("course", ("compute_entropy",), official=True)
    assert len(reads) > 1 and not graded["incomplete"]
    assert graded["score"] == graded["max_score"] > 0, graded["results"]
    monkeypatch.setattr(sandbox.StageClient, "_read",
                        lambda self, timeout, doing: times_out(self, timeout, doing, True))
    hung = grade("course", ("compute_entropy",), official=True)
    assert hung["score"] == 0 and not hung["incomplete"]
    assert all("timed out after" in r["output"] for r in hung["results"].values())


def _loads(monkeypatch, stop_first: bool = False) -> list:
    """Count the stage children's loads (their answers to "loading the submission"), with the
    load time-out cut to 10 s; `stop_first`: SIGSTOP the first child as it starts loading, so that
    it gets no CPU at all, as a child of a machine too busy to run it would."""
    import signal

    from autograder.trusted import grader, sandbox

    monkeypatch.setattr(grader, "LOAD_TIMEOUT", 10.0)
    real, loads = sandbox.StageClient._read, []

    def read(self, timeout, doing):
        if doing == "loading the submission":
            loads.append(timeout)
            if stop_first and len(loads) == 1:
                for _ in range(200):  # tier 1: until the child has taken its user id
                    if self.process.cpu_seconds() is not None:
                        break
                    time.sleep(0.01)
                os.kill(self.process.host_pid, signal.SIGSTOP)
        return real(self, timeout, doing)

    monkeypatch.setattr(sandbox.StageClient, "_read", read)
    return loads


@pytest.mark.parametrize("tier", ("bubblewrap", "landlock"))
def test_a_top_level_loop_is_the_submissions_at_once_and_a_starved_load_is_retried(
        tier, tmp_path, monkeypatch):
    """A `.py` whose top level loops forever: its child had the CPU for the whole load time-out,
    so the stage fails at once saying so (no retry with twice the time), and the grading completes.
    A child that had no CPU (SIGSTOP) was starved: loaded again with twice the time, full marks.
    Prints the seconds the loop cost."""
    if sandbox_problem(ROOT, tier):
        pytest.skip(f"no {tier} sandbox here: {sandbox_problem(ROOT, tier)}")
    looping = tmp_path / "looping.py"
    looping.write_text("while True:\n    pass\n\n\ndef compute_entropy(logits):\n"
                       "    return logits.sum(-1)\n")
    loads = _loads(monkeypatch)
    started = time.monotonic()
    graded = grade(str(looping), ("compute_entropy",), official=True, isolation=tier)
    seconds = time.monotonic() - started
    print(f"{tier}: a top-level loop failed its stage in {seconds:.1f} s (load time-out 10 s)")
    said = " ".join(r["output"] for r in graded["results"].values())
    assert loads == [10.0] and "an infinite loop, or far too slow?" in said, (loads, said)
    assert graded["score"] == 0 and not graded["incomplete"], graded["incomplete"]
    monkeypatch.undo()
    loads = _loads(monkeypatch, stop_first=True)
    starved = grade("course", ("compute_entropy",), official=True, isolation=tier)
    assert loads == [10.0, 20.0] and not starved["incomplete"], (loads, starved["incomplete"])
    assert starved["score"] == starved["max_score"] > 0, starved["results"]


def _chain(top: Path, depth: int) -> None:
    """`depth` nested folders under `top`, made through descriptors (no path grows long)."""
    fd = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = below
    os.close(fd)


def test_clean_up_walks_a_deep_chain_without_recursion_or_following_links():
    """3,000 nested folders (shutil.rmtree: RecursionError), a link to a folder outside, a folder
    its owner made unreadable: all deleted, the link's target untouched, no descriptor left open;
    a bound on entries is reported in words, not raised. (In a folder of its own, deleted by the
    walk whatever happens: pytest's own clean-up of tmp_path recurses.)"""
    import tempfile

    from autograder.protocol import cleanup

    here = Path(tempfile.mkdtemp(prefix="test-cleanup-"))
    try:
        outside = here / "outside"
        outside.mkdir()
        (outside / "keep").write_text("mine")
        tree = here / "tree"
        tree.mkdir()
        _chain(tree, 3000)
        (tree / "link").symlink_to(outside)
        (tree / "locked").mkdir()
        (tree / "locked" / "file").write_bytes(b"x" * 5000)
        os.chmod(tree / "locked", 0)
        recursive = here / "recursive"
        recursive.mkdir()
        _chain(recursive, 3000)
        with pytest.raises(RecursionError):
            shutil.rmtree(recursive)  # what the walk replaces
        assert cleanup.remove(str(recursive)) is None
        descriptors = len(os.listdir("/proc/self/fd"))
        used, entries, why = cleanup.usage(str(tree), 10_000)
        assert why is None and entries >= 3003 and used >= 4096  # the file's block, once
        assert "more than 100 entries" in cleanup.remove(str(tree), entries=100)
        assert cleanup.remove(str(tree)) is None and not tree.exists()
        assert (outside / "keep").read_text() == "mine"
        assert len(os.listdir("/proc/self/fd")) == descriptors
        assert cleanup.remove(str(tree)) is None  # already gone: nothing to say
    finally:
        cleanup.remove(str(here))


def test_the_disk_watchdog_counts_allocated_blocks_once_and_names_the_bound(tmp_path, monkeypatch):
    """fallocate'd blocks count, a sparse file's holes do not, a hard link counts once; past the
    budget or the entry bound, the verdict says which, in the student's words."""
    from autograder.trusted import diskwatch

    monkeypatch.setattr(diskwatch, "BUDGET", 3 * 2**20)
    with open(tmp_path / "sparse", "wb") as handle:
        handle.truncate(64 * 2**20)
    fd = os.open(tmp_path / "full", os.O_WRONLY | os.O_CREAT)
    os.posix_fallocate(fd, 0, 2 * 2**20)
    os.close(fd)
    os.link(tmp_path / "full", tmp_path / "again")
    assert diskwatch.verdict(str(tmp_path)) is None  # 2 MiB, not 66 or 4
    fd = os.open(tmp_path / "more", os.O_WRONLY | os.O_CREAT)
    os.posix_fallocate(fd, 0, 2 * 2**20)
    os.close(fd)
    assert "held 4 MiB on disk, more than the 3 MiB" in diskwatch.verdict(str(tmp_path))
    monkeypatch.setattr(diskwatch, "BUDGET", 2**30)
    monkeypatch.setattr(diskwatch, "INODES", 3)
    assert "more than 3 files and folders" in diskwatch.verdict(str(tmp_path))


def test_the_disk_watchdog_counts_deleted_files_held_open_and_a_fall_in_free_space(
        tmp_path, monkeypatch):
    """A file deleted but held open (or mapped) counts, once however often it is held, though no
    walk finds it; and a child that holds more than its share stops when the disk's free space
    fell by more than the budget since it started, though its own count is under the budget."""
    import mmap

    from autograder.trusted import diskwatch

    monkeypatch.setattr(diskwatch, "BUDGET", 3 * 2**20)
    monkeypatch.setattr(diskwatch, "SHARE", 2**20)
    monkeypatch.setattr(diskwatch.cleanup, "processes_of", lambda uids: [os.getpid()])  # ours
    path = tmp_path / "gone"
    with open(path, "wb") as handle:
        handle.write(b"\1" * 2 * 2**20)
    held = os.open(path, os.O_RDONLY)
    mapped = mmap.mmap(held, 0, prot=mmap.PROT_READ)
    again = os.open(path, os.O_RDONLY)
    path.unlink()
    try:
        free = diskwatch.free_bytes(str(tmp_path))
        assert diskwatch.verdict(str(tmp_path), os.getuid(), free) is None  # 2 MiB, once
        with open(tmp_path / "kept", "wb") as handle:
            handle.write(b"\1" * 2 * 2**20)
        said = diskwatch.verdict(str(tmp_path), os.getuid(), free)
        assert said == ("it held 4 MiB on disk, more than the 3 MiB a stage may write (2 MiB of "
                        "it in files it deleted but holds open)")
        assert diskwatch.verdict(str(tmp_path)) is None  # the folder alone: 2 MiB
        os.unlink(tmp_path / "kept")
        said = diskwatch.verdict(str(tmp_path), os.getuid(), free + 5 * 2**20)
        assert re.fullmatch(r"it held 2 MiB on disk, while the disk's free space fell by \d+ MiB, "
                            r"more than the 3 MiB .*", said), said
    finally:
        mapped.close()
        os.close(held)
        os.close(again)


def test_the_disk_budget_of_a_tier_2_stage_is_tier_1s_whole_tmpfs():
    from autograder.trusted import diskwatch
    from autograder.trusted.isolation import TMPFS_MB

    assert diskwatch.BUDGET == (512 + 256 + 256) * 2**20 == sum(TMPFS_MB.values()) * 2**20


@needs_sandbox
def test_a_clean_up_that_fails_makes_the_grading_incomplete_in_words(monkeypatch):
    """Fault injection: the sandbox's folders cannot be deleted when it closes; the grading is
    incomplete and says so, and the grader does not crash."""
    from autograder.trusted import sandbox

    real = sandbox.cleanup.remove

    def refused(path):
        real(path)  # deleted all the same: the test leaves nothing behind
        return f"{path} holds more than 3 entries"

    monkeypatch.setattr(sandbox.cleanup, "remove", refused)
    graded = grade("course", ("compute_entropy",), official=True)
    assert any("could not all be deleted" in why for why in graded["incomplete"]), graded


ATTACKS = ("network_unix_socket_path.py", "disk_nested_folders.py", "disk_fallocate.py",
           "disk_unlinked_files.py")
OVERSHOOT = 256 * 2**20  # what tier 2's stage may hold beyond its budget when it is stopped


@pytest.fixture
def root_socket():
    """The root-owned unix sockets (stream: hands out the reference; datagram: a mailbox) that the
    socket attack looks for outside the sandbox, mode 0666: only the sandbox stands between."""
    import socket

    from test_redteam import REFERENCE_SOCKET

    made = []
    for path, kind in ((REFERENCE_SOCKET, socket.SOCK_STREAM),
                       (REFERENCE_SOCKET + ".dgram", socket.SOCK_DGRAM)):
        with contextlib.suppress(OSError):
            os.unlink(path)
        server = socket.socket(socket.AF_UNIX, kind)
        server.bind(path)
        os.chmod(path, 0o666)
        server.setblocking(False)
        if kind == socket.SOCK_STREAM:
            server.listen()
        made.append(server)
    yield made
    for server in made:
        with contextlib.suppress(OSError):  # another test's fixture took the path meanwhile
            os.unlink(server.getsockname())
        server.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", ATTACKS)
@pytest.mark.parametrize("tier", ("bubblewrap", "landlock"))
def test_socket_path_folder_chain_and_fallocate_are_stopped_and_the_grading_completes(
        tier, name, root_socket, monkeypatch):
    """Each attack is graded with copies allowed (only isolation stops it): it earns nothing, no
    message reaches the host's sockets, the grading completes, and none of the sandbox's folders
    is left in /tmp; in tier 2 the disk watchdog says why it stopped the fallocate."""
    from autograder.trusted import sandbox

    if sandbox_problem(ROOT, tier):
        pytest.skip(f"no {tier} sandbox here: {sandbox_problem(ROOT, tier)}")
    folders, real_init = [], sandbox.Sandbox.__init__

    def recording(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        folders.extend(f for f in (self.private, self.stages) if f)

    monkeypatch.setattr(sandbox.Sandbox, "__init__", recording)
    graded = grade(str(ROOT / "tests" / "redteam" / name), ("compute_entropy",), official=True,
                   isolation=tier, allow_reference=True, probe_timeout=10.0)
    said = " ".join([graded["load_failure"] or ""] + [r["output"] for r in graded["results"].values()])
    assert graded["max_score"] > 0 and graded["score"] == 0, said
    assert not graded["incomplete"], graded["incomplete"]
    assert folders and not [f for f in folders if os.path.exists(f)]
    for server in root_socket:
        with pytest.raises(BlockingIOError):
            server.accept() if server.type == 1 else server.recv(100)
    if tier == "landlock" and name.startswith("disk_") and name != "disk_nested_folders.py":
        held = re.search(r"it held (\d+) MiB on disk, more than the 1024 MiB a stage may write",
                         said)
        assert held and int(held.group(1)) * 2**20 <= BUDGET + OVERSHOOT, said
        print(f"{name}: stopped holding {held.group(1)} MiB")
    if tier == "landlock" and name == "disk_unlinked_files.py":
        assert "in files it deleted but holds open" in said, said


@needs_sandbox
@pytest.mark.slow
def test_four_gradings_at_once_with_two_busy_processes_keep_full_marks():
    """Load must not be mistaken for failure. Prints each grading's time (never asserted)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    submissions = ["course", str(ROOT / "solutions"),
                   str(ROOT / "tests" / "autograder_cases" / "alt_full.py"), "course"]
    try:
        def timed(submission):
            started = time.monotonic()
            # the solution notebooks hold the reference: graded as an instructor's check
            checked = submission.endswith("solutions")
            return grade(submission, official=True, allow_reference=checked), time.monotonic() - started

        with ThreadPoolExecutor(max_workers=4) as pool:
            graded = list(pool.map(timed, submissions))
    finally:
        for process in busy:
            process.kill()
            process.wait()
    for submission, (result, seconds) in zip(submissions, graded):
        print(f"{Path(submission).name}: {result['score']:g}/{result['max_score']:g} in {seconds:.0f} s")
        failed = {n: r["output"][:300] for n, r in result["results"].items() if r["status"] == "failed"}
        assert result["score"] == result["max_score"] > 50, (submission, failed)


def test_logs_are_read_through_the_graders_own_descriptor_tail_only_never_blocking(tmp_path):
    from autograder.trusted.sandbox import LOG_BYTES, read_tail

    log = tmp_path / "worker.log"
    log.write_bytes(b"a" * (3 * LOG_BYTES) + b"the end")
    fd = os.open(log, os.O_RDONLY)
    try:
        tail = read_tail(fd)
    finally:
        os.close(fd)
    assert len(tail) == LOG_BYTES and tail.endswith(b"the end")
    os.mkfifo(tmp_path / "pipe")
    fd = os.open(tmp_path / "pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert read_tail(fd) == b""  # not a regular file: nothing read, nothing waited for
    finally:
        os.close(fd)


def test_pasted_copies_are_caught_and_independent_work_is_not():
    from autograder.trusted.grader import _sources
    from autograder.trusted.reference import COURSE_DIR, THRESHOLDS, copied_references
    from course.registry import HOME_MODULES
    from course.submissions.reader import load_submission

    zeroed = {name for name, threshold in THRESHOLDS.items() if threshold is not None}
    whole_reference = [p.read_text() for p in COURSE_DIR.glob("*.py")]  # flagged, not refused:
    assert copied_references(whole_reference) == {}  # its reflection is judged where it runs
    graded_modules = [(COURSE_DIR / f"{module.split('.')[1]}.py").read_text()
                      for module in set(HOME_MODULES.values())]
    assert copied_references(graded_modules) == {}  # the default flags, and costs nothing
    assert set(copied_references(graded_modules, "zero")) == zeroed
    # the solution cells are the course functions themselves (tests/test_one_implementation.py)
    assert set(copied_references(_sources(load_submission("solutions", ROOT)), "zero")) == zeroed
    for independent in ("tests/autograder_cases/alt_full.py",
                        "tests/autograder_cases/alt_loops.py"):
        assert copied_references(_sources(load_submission(independent, ROOT)), "zero") == {}, \
            independent


@needs_sandbox
@pytest.mark.slow
def test_no_grader_module_is_imported_after_student_code_has_run():
    """Everything the trusted side uses is imported before the first worker starts."""
    script = """
import sys
from autograder.trusted import grader
from autograder.api import grade

start, seen = grader.Grader._ensure_started, {}

def ensure_started(self):
    seen.setdefault("before", set(sys.modules))
    start(self)

grader.Grader._ensure_started = ensure_started
result = grade("course")
late = sorted(m for m in set(sys.modules) - seen["before"] if m.split(".")[0] in ("autograder", "course"))
print(result["score"], result["max_score"], late)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    score, maximum, late = done.stdout.strip().splitlines()[-1].split(" ", 2)
    assert float(score) == float(maximum) > 50 and late == "[]", done.stdout[-2000:]


def test_the_template_holds_the_plotting_modules_and_never_a_graded_one(monkeypatch):
    """The template imports course.loop.models and course.loop.plotting (the notebooks' plots) once for
    every child; a graded module among what they import would put its reference in every child,
    so it refuses to start and names the module."""
    from autograder.trusted import reference
    from course.registry import STAGE_MODULES

    held = reference.template_sources()
    assert {"course.loop.models", "course.loop.plotting"} <= set(held) and not set(held) & set(STAGE_MODULES)
    sources = reference.course_sources
    monkeypatch.setattr(reference, "course_sources", lambda stage: {
        **sources(stage), "course.loop.plotting": "from course.losses import clipped_surrogate\n"})
    with pytest.raises(RuntimeError, match=r"graded modules \['course.losses'\]"):
        reference.template_sources()


def test_a_grading_without_model_functions_never_imports_the_models_code():
    """compute_entropy builds no model: the trusted process grades it in full without
    transformers' modeling code (about 2 s of imports), and a grading of every function has it
    imported before the first worker starts."""
    script = """
import sys
from autograder.trusted import grader
from autograder.api import grade

MODELING = "transformers.models.olmo2.modeling_olmo2"
start, seen = grader.Grader._ensure_started, []

def ensure_started(self):
    start(self)
    seen.append(MODELING in sys.modules)

grader.Grader._ensure_started = ensure_started
lean = grade("course", ("compute_entropy",))
print(lean["score"], lean["max_score"], MODELING in sys.modules, seen)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    score, maximum, imported, seen = done.stdout.strip().splitlines()[-1].split(" ", 3)
    assert float(score) == float(maximum) > 0, done.stdout[-2000:]
    assert imported == "False" and "False" in seen and "True" not in seen, done.stdout[-2000:]


@needs_sandbox
def test_one_timer_bounds_the_whole_grading():
    """A hang with a 30 s probe timeout but a 12 s budget for everything (from the call, the
    sandbox's start included): the hanging call is cut at what is left of the budget, not blamed
    on the code (its 30 s were not up), the checks after it (stage 3's come after stage 2's, in
    course order) are not run, and the grading says it did not complete: no grade."""
    graded = grade(str(ROOT / "tests" / "redteam" / "classification_hang.py"),
                   ("compute_entropy", "compute_rollout_rewards"), probe_timeout=30.0, time_limit=12.0)
    outputs = [r["output"] for r in graded["results"].values()]
    assert not any("timed out after" in o for o in outputs), outputs
    assert all("ran past its time limit (12 s, `--time-limit`)" in o for o in outputs), outputs
    assert any("time limit of 12 s" in reason for reason in graded["incomplete"])


@pytest.mark.parametrize("tier", ("bubblewrap", "landlock"))
def test_a_notebooks_self_check_import_is_no_load_problem_in_either_tier(tier):
    """Every notebook imports `autograder.selfcheck` for its check cells; tier 2 cannot read that
    module (it drives the grader), so the child's import finds a stand-in: no problem is reported
    to the student, and the function is graded."""
    if sandbox_problem(ROOT, tier):
        pytest.skip(f"no {tier} sandbox here: {sandbox_problem(ROOT, tier)}")
    graded = grade(str(ROOT / "solutions" / "01_tokenization.ipynb"),
                   ("tokenize_prompt_and_output",), isolation=tier, allow_reference=True)
    assert not any("selfcheck" in problem for problem in graded["load_errors"]), \
        graded["load_errors"]
    assert graded["score"] == graded["max_score"] > 0, graded["results"]
