"""The grader's side of the worker: the sandbox, one child per stage, requests and answers.

`Sandbox` starts the worker (`autograder/untrusted/worker.py`, a template process) in an isolation
tier (see `autograder.trusted.isolation`: inside bubblewrap, or as a plain root process whose
children confine themselves with Landlock and seccomp), or, for a practice grade where no tier
holds, as a plain subprocess; where the machine lets it, the template and all it forks share one
memory cgroup (`autograder.trusted.memory`); in tier 2 a disk watchdog runs beside it
(`autograder.trusted.diskwatch`) and says why it stopped a child. When it closes, every process of
its children's user ids is killed (tier 2 has no PID namespace that would end them) and its folders
are deleted by an iterative walk (`autograder.protocol.cleanup`); what could not be deleted is
kept in `cleanup_failures` (the grading is then incomplete). A `_reply` that does not come in time
closes the sandbox ("overloaded"): the grader starts it again (`Grader._run`); a fork asked of a
closed sandbox raises WorkerError too. `StageClient` is the grader's end of one stage's child,
forked by the template (`StageProcess`: its pid, and how it ended): the grader sends it requests
and reads its answers through pipes it made itself, decoded by `autograder.protocol.wire` (size-capped,
checked before anything is built), with a wall-clock deadline per request. A child that dies or
hangs is reaped (it and every process of its user id) and replaced for the next request; how it
ended is told in the student's words: timed out, killed for memory, exited, killed by a signal.
A time-out is the submission's ("loop") where the child had the CPU for at least `LOOP_SHARE` of
the time it was given (its user and system time in /proc/PID/stat, proc(5)): an infinite loop or
far too slow; otherwise it was starved or waiting ("timeout"), which the grader may retry.
The grader reads nothing by a path the worker could have written: logs go to files the grader
created in its own private folder, read back through the grader's own descriptors, size-capped.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.protocol import cleanup, wire
from autograder.trusted import isolation, memory

WORKER_SCRIPT = Path(__file__).resolve().parents[1] / "untrusted" / "worker.py"
DISK_WATCH = Path(__file__).resolve().with_name("diskwatch.py")
LOG_BYTES = 2**16  # the most of a worker's output the grader reads back
CHILD_PROCESSES = 32  # per stage child, threads included (a DDP train step peaks at 9)
CHILD_FILE_BYTES = 64 * 2**20
CHILD_FILES = 256  # descriptors per process (Docker's default is 1,048,576): deleted files held open
CHILD_CPU_SECONDS = 1800  # a backstop under the wall-clock deadlines: a stray spinner ends too
LOOP_SHARE = 0.25  # a time-out promises the child a quarter of a CPU: one that had it ran


class WorkerError(Exception):
    """The worker did not answer: `kind` is "timeout" (starved or waiting), "loop" (timed out with
    the CPU: the submission's doing), "crash", "garbage" or "overloaded"."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _limit_template() -> None:
    """Before exec (practice mode and bwrap alike): no core dumps, bounded files. Memory is bounded
    per child (`_child_limits`), on top of what the template maps: torch's own libraries take
    0.7 GB of address space in a CPU build and 3.3 GB in a CUDA one, which no fixed limit fits."""
    import ctypes

    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("-1000")  # root only: under memory pressure the stage children go first
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (CHILD_FILE_BYTES, CHILD_FILE_BYTES))
    with contextlib.suppress(Exception):  # die with the grader (PR_SET_PDEATHSIG = 1)
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)


def cpu_seconds(pid: int) -> float | None:
    """User and system time of `pid` and of the children it waited for (fields 14-17 of
    /proc/PID/stat, proc(5)), in seconds; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()  # after the command's name: field 3
        return sum(int(field) for field in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def oldest_process_of(uid: int) -> int | None:
    """The grader's pid of the first process of user `uid` (a stage child's user is its own: the
    child itself), or None. Tier 1 hands the grader pids of its own PID namespace, not these."""
    found = []
    for pid in cleanup.processes_of(range(uid, uid + 1)):
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:  # field 22: its start time
                found.append((int(handle.read().rsplit(b")", 1)[1].split()[19]), pid))
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
    return min(found)[1] if found else None


def read_tail(fd: int, limit: int = LOG_BYTES) -> bytes:
    """The last `limit` bytes of a regular file the grader opened itself (never by a path)."""
    info = os.fstat(fd)
    if not (info.st_mode & 0o170000 == 0o100000):
        return b""
    return os.pread(fd, limit, max(0, info.st_size - limit))


class Sandbox:
    """The template worker of one grading: in the isolation `tier` ("bubblewrap" or
    "landlock-seccomp"; by default the first that holds here) when `isolated`, else a plain
    subprocess (a practice grade)."""

    def __init__(self, root: Path, device: str, memory_mb: int, isolated: bool, visible=(),
                 tier: str | None = None):
        self.root, self.device, self.isolated, self.visible = root, device, isolated, visible
        self.tier = (tier or isolation.isolation_tier(root)[0] or "bubblewrap") if isolated else None
        self.memory_bytes = memory_mb * 2**20  # per child, on top of what the template mapped
        self.process = self.control = self.watchdog = None
        self.disk_verdicts: dict[int, str] = {}  # uid -> why the watchdog stopped its child
        self.cleanup_failures: list[str] = []  # what could not be deleted (the grading is incomplete)
        self.private = tempfile.mkdtemp(prefix="autograder-")  # 0700: the grader's own folder
        self.stages = None  # tier 2: the folder of the children's private folders (0711)
        if self.tier == "landlock-seccomp":
            self.stages = tempfile.mkdtemp(prefix="autograder-stages-")
            os.chmod(self.stages, 0o711)
        self.uid_base = 200_000 + 100 * (int.from_bytes(os.urandom(3), "little") % 80_000)
        self.forks = 0
        self.cgroup, self.memory_bound = None, "by the machine (no cgroup made yet)"
        # the template imports transformers' modeling code as it starts (`Grader.expect`: not
        # when the grading checks no function that builds a model)
        self.models = True
        # and the notebooks' plotting (course.loop.plotting, matplotlib): a notebook submission's
        # every stage imports it; a .py or a module seldom does (`Grader.expect`)
        self.plots = True

    def start(self, timeout: float) -> None:
        """Start the template and wait until it has imported torch (raises WorkerError)."""
        self.close(keep_folder=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-I", "-B", str(WORKER_SCRIPT), str(theirs.fileno()),
                   str(self.root)]
        if self.tier == "bubblewrap":
            command = isolation.bwrap_command(self.root, self.visible, self.device) + command
        home = tempfile.mkdtemp(prefix="home-", dir=self.private)
        self.log_fd = os.open(os.path.join(self.private, "template.log"),
                              os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                              0o600)
        self.cgroup, why = memory.create(f"autograder-{os.getpid()}-{self.uid_base}")
        cgroup = self.cgroup

        def before_exec() -> None:
            _limit_template()
            if cgroup is not None:
                memory.join(cgroup)

        if self.stages is not None:  # tier 2's disk budget (tier 1's is its tmpfs sizes)
            self.watchdog = subprocess.Popen(
                [sys.executable, "-I", "-B", str(DISK_WATCH), self.stages],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
            os.set_blocking(self.watchdog.stdout.fileno(), False)
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=self.log_fd, stderr=self.log_fd, cwd=home,
            env=isolation.environment(home, self.device), pass_fds=(theirs.fileno(),),
            start_new_session=True, preexec_fn=before_exec)
        theirs.close()
        self.control = ours
        from autograder.trusted.reference import template_sources

        setup = {"course": template_sources(), "limits": self._child_limits(),
                 "models": self.models, "plots": self.plots}
        if self.tier == "bubblewrap":  # what a child could write, wiped before the next one
            setup["wipe"] = ["/tmp", "/dev/shm", isolation.HOME]
        elif self.tier == "landlock-seccomp":
            setup["landlock"] = {"read_only": isolation.landlock_read_only(self.root, self.visible),
                                 "stages": self.stages}
        with contextlib.suppress(OSError):
            wire.write_frame(self.process.stdin.fileno(), pickle.dumps(setup),
                             time.monotonic() + timeout)
            self.process.stdin.close()
        reply = self._reply(timeout, "starting")
        if not reply.get("ready"):
            raise WorkerError("crash", "the sandbox did not start")
        self._bound_memory(why)

    def _bound_memory(self, why: str) -> None:
        """One limit over the template and all it forks: what it holds now plus --memory-mb."""
        if self.cgroup is not None:
            try:
                total = memory.usage(self.cgroup) + self.memory_bytes
                memory.limit(self.cgroup, total)
                self.memory_bound = f"by a memory cgroup of {total >> 20} MiB over all its processes"
                return
            except (OSError, ValueError) as exc:
                why = f"its memory cgroup refused a limit ({exc})"
        self.memory_bound = (f"not by the grader ({why}): the machine's or the container's own "
                             "memory limit bounds it")

    def _child_limits(self) -> dict:
        limits = {"RLIMIT_NPROC": CHILD_PROCESSES, "RLIMIT_FSIZE": CHILD_FILE_BYTES,
                  "RLIMIT_NOFILE": CHILD_FILES, "RLIMIT_CORE": 0, "RLIMIT_CPU": CHILD_CPU_SECONDS}
        if self.memory_bytes:
            limits["RLIMIT_AS"] = self.memory_bytes
        return limits

    def _reply(self, timeout: float, doing: str) -> dict:
        ready = select.select([self.control], [], [], max(0.0, timeout))[0]
        if not ready:
            self.close(keep_folder=True)
            raise WorkerError("overloaded", f"the grader is overloaded: its sandbox did not "
                                            f"answer within {timeout:.0f} s while {doing}")
        message = self.control.recv(1 << 16)
        if not message:
            tail = read_tail(self.log_fd, 2000).decode("utf-8", "replace").strip()
            self.close(keep_folder=True)
            raise WorkerError("crash", f"the sandbox stopped while {doing}"
                                       + (f": {tail[-600:]}" if tail else ""))
        return json.loads(message)

    def fork(self, stage: str, fds: list, ranks: int = 0) -> tuple[int, int]:
        """A new child for `stage` with these descriptors (and `ranks` data-parallel ranks forked
        before its submission loads: tier 2); returns (pid, uid) inside the sandbox."""
        if self.control is None:
            raise WorkerError("crash", "the sandbox had stopped")
        self.forks += 1
        uid = self.uid_base + self.forks % 100 if self.isolated and os.geteuid() == 0 else 0
        self.disk_verdict(uid)  # an earlier child's, of the same user id: not this one's
        socket.send_fds(self.control, [json.dumps({"op": "fork", "stage": stage, "uid": uid,
                                                   "ranks": ranks}).encode()], fds)
        return self._reply(60, "starting a worker")["pid"], uid

    def reap(self, pid: int, uid: int, grace: float) -> dict:
        """End the child `pid` and every process of its user; how it ended."""
        if self.control is None:
            return {"signal": signal.SIGKILL, "killed_by_grader": True}
        self.control.send(json.dumps({"op": "reap", "pid": pid, "uid": uid,
                                      "grace": grace}).encode())
        status = self._reply(60 + grace, "ending a worker")
        if status.get("cleanup"):
            self.cleanup_failures.append(str(status["cleanup"])[:300])
        return status

    def disk_verdict(self, uid: int) -> str | None:
        """Why the disk watchdog stopped the child of `uid`, if it did (and forget it)."""
        if self.watchdog is not None:
            with contextlib.suppress(OSError, TypeError):
                for line in (self.watchdog.stdout.read() or b"").splitlines():
                    with contextlib.suppress(ValueError, KeyError):
                        told = json.loads(line)
                        self.disk_verdicts[int(told["uid"])] = str(told["why"])
        return self.disk_verdicts.pop(uid, None)

    def uids(self) -> range:
        """The user ids this grading's children run under (none where they share the grader's)."""
        if not self.isolated or os.geteuid() != 0:
            return range(0)
        return range(self.uid_base, self.uid_base + 100)

    def close(self, keep_folder: bool = False) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                self.process.wait(timeout=30)
            self.process = None
            os.close(self.log_fd)
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait()
            self.watchdog.stdout.close()
            self.watchdog = None
        cleanup.kill_users(self.uids())  # tier 2 has no PID namespace to end its daemons with it
        if self.cgroup is not None:
            memory.remove(self.cgroup)
            self.cgroup = None
        if self.control is not None:
            self.control.close()
            self.control = None
        # iterative and bounded (`autograder.protocol.cleanup`): what a child left never raises here
        left = [cleanup.empty(self.stages)] if self.stages is not None else []
        if not keep_folder:
            left += [cleanup.remove(self.private)] + \
                ([cleanup.remove(self.stages)] if self.stages is not None else [])
        self.cleanup_failures += [f"the sandbox's files could not all be deleted: {why}"
                                  for why in left if why]


class StageProcess:
    """A stage's child process inside the sandbox, as the grader sees it: its request pipe and
    how it ended."""

    def __init__(self, sandbox: Sandbox, pid: int, uid: int, stdin):
        self.sandbox, self.pid, self.uid, self.stdin = sandbox, pid, uid, stdin
        self.status: dict | None = None
        self.host_pid: int | None = None if sandbox.tier == "bubblewrap" else pid

    def cpu_seconds(self) -> float | None:
        """The child's CPU time so far (None where the grader cannot see it: tier 1 without a
        user id of its own)."""
        if self.host_pid is None and self.uid:
            self.host_pid = oldest_process_of(self.uid)
        return cpu_seconds(self.host_pid) if self.host_pid is not None else None

    def wait(self, timeout: float | None = None, grace: float = 2.0) -> int:
        if self.status is None:
            self.status = self.sandbox.reap(self.pid, self.uid, grace)
        return -self.status["signal"] if "signal" in self.status else self.status["exit"]

    def poll(self) -> int | None:
        return None if self.status is None else self.wait()


class StageClient:
    """The grader's end of one stage's child (which loads the submission with the stage's
    references stubbed): a fresh child after a crash, requests out, answers in."""

    def __init__(self, sandbox: Sandbox, stage: str, config: dict, load_timeout: float = 90.0,
                 memory_mb: int | None = None, ranks: int = 0):
        self.sandbox, self.stage, self.config = sandbox, stage, config
        self.ranks = ranks
        self.load_timeout = load_timeout
        self.memory_mb = memory_mb
        self.process: StageProcess | None = None
        self.ready = None  # the load report of the current child
        self.log_fd = None
        self.last_status: dict | None = None  # how the previous child ended
        self.last_uid = -1  # and its user id

    def start(self) -> dict:
        """Fork a fresh child and return its load report (raises WorkerError)."""
        self.kill()
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        if self.log_fd is not None:
            os.close(self.log_fd)
        self.log_fd = os.open(os.path.join(self.sandbox.private, f"{self.stage}.log"),
                              os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                              0o600)
        try:
            pid, uid = self.sandbox.fork(self.stage, [request_read, answer_write, self.log_fd],
                                         self.ranks)
        finally:
            os.close(request_read)
            os.close(answer_write)
        self.process = StageProcess(self.sandbox, pid, uid, os.fdopen(request_write, "wb"))
        self.read_fd = answer_read
        self._write(self.config)
        self.ready = self._read(self.load_timeout, "loading the submission")
        return self.ready

    def request(self, message: dict, timeout: float) -> dict:
        if self.process is None or self.process.poll() is not None:
            self.start()
        self._write(message)
        return self._read(timeout, f"running {message.get('function', 'a probe')}")

    def _write(self, message: dict, timeout: float | None = None) -> None:
        """Send one request (a pickle: the worker is the untrusted side), never blocking for long."""
        try:
            fd = self.process.stdin.fileno()
            os.set_blocking(fd, False)
            wire.write_frame(fd, pickle.dumps(message),
                             time.monotonic() + (timeout or self.load_timeout))
        except wire.Timeout:
            self.kill()
            raise WorkerError("timeout", "the worker stopped reading the grader's requests") \
                from None
        except (OSError, ValueError):
            pass  # the read below reports the crash

    def _read(self, timeout: float, doing: str) -> dict:
        """One answer, decoded by `autograder.protocol.wire` (size-capped, under a time limit)."""
        before = self.process.cpu_seconds() or 0.0  # unseen yet: a child just forked (its 0)
        try:
            return wire.decode(wire.read_frame(self.read_fd, time.monotonic() + timeout))
        except wire.Timeout:
            after = self.process.cpu_seconds()
            self.kill()
            raise self._timed_out(timeout, doing, before, after) from None
        except wire.Closed:
            self.process.wait()
            tail = self.log_tail()
            self.kill()
            raise WorkerError("crash", f"{self.death(doing, tail)}{tail}") from None
        except wire.WireError as exc:
            self.kill()
            raise WorkerError("garbage", f"an answer the grader refuses while {doing}: {exc}") \
                from None

    @staticmethod
    def _timed_out(timeout: float, doing: str, before: float, after) -> WorkerError:
        """Whose time-out it was: the child's where it had the CPU for `LOOP_SHARE` of it."""
        if after is None:
            return WorkerError("timeout", f"timed out after {timeout:.0f} s while {doing} "
                                          "(an infinite loop, or far too slow?)")
        used = after - before
        if used >= LOOP_SHARE * timeout:
            return WorkerError("loop", f"timed out after {timeout:.0f} s while {doing}, having "
                                       f"used {used:.0f} s of CPU (an infinite loop, or far too "
                                       "slow?)")
        return WorkerError("timeout", f"timed out after {timeout:.0f} s while {doing}, having had "
                                      f"only {used:.0f} s of CPU (the machine may be overloaded)")

    def log_tail(self, characters: int = 600) -> str:
        if self.log_fd is None:
            return ""
        with contextlib.suppress(OSError):
            text = read_tail(self.log_fd).decode("utf-8", "replace").strip()[-characters:]
            if text:
                return f"\n  last output of the worker:\n  {text}"
        return ""

    def death(self, doing: str, tail: str) -> str:
        """How the child ended, in the student's words."""
        status = self.process.status if self.process else self.last_status
        disk = self.sandbox.disk_verdict(self.process.uid if self.process else self.last_uid)
        if disk:
            return f"your code was stopped while {doing}: {disk}"
        limit = (f" (the limit is {self.memory_mb} MiB beyond the grader's own libraries)"
                 if self.memory_mb else "")
        if status is None:
            return f"the worker process ended while {doing}"
        if "signal" in status:
            if status["signal"] == signal.SIGKILL:
                return (f"your code was killed for memory while {doing}: it used more than the "
                        f"machine could give{limit}")
            name = signal.Signals(status["signal"]).name if status["signal"] in \
                signal.Signals._value2member_map_ else str(status["signal"])
            return f"your code was killed by signal {name} while {doing} (a crash in native code?)"
        if "MemoryError" in tail or "bad_alloc" in tail:
            return f"your code was killed for memory while {doing}: it ran out of memory{limit}"
        return (f"your code exited with code {status['exit']} while {doing} (did it call "
                "os._exit or sys.exit?)")

    def kill(self) -> None:
        if self.process is not None:
            with contextlib.suppress(WorkerError, OSError):
                self.process.wait(grace=0.0)
            self.last_status, self.last_uid = self.process.status, self.process.uid
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            with contextlib.suppress(OSError):
                os.close(self.read_fd)
            self.process = None

    def close(self) -> None:
        self.kill()
        if self.log_fd is not None:
            os.close(self.log_fd)
            self.log_fd = None
