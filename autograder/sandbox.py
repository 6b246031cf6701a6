"""The parent's side of the worker: start it isolated, send requests, decode answers safely.

Isolation, in layers: a fresh interpreter (`python -I`: no PYTHONPATH, no user site) in an empty
temporary directory; an environment with only what torch needs; `setrlimit` caps on address space,
file size and core dumps; a wall-clock deadline per request, after which the whole process group
is killed; answers decoded by `autograder.wire` (size-capped, checked before anything is built).
A worker that dies or hangs is replaced by a fresh one for the next request.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder import wire

WORKER_SCRIPT = Path(__file__).with_name("worker.py")


class WorkerError(Exception):
    """The worker did not answer: `kind` is "timeout", "crash" or "garbage"."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


NOBODY = 65534


def _reachable_by_others(path: Path) -> bool:
    """Can an unprivileged user reach `path` (every ancestor directory world-executable)?"""
    path = path.resolve()
    return all(p.stat().st_mode & 0o001 for p in [*path.parents, path] if p.is_dir()) and \
        bool(path.stat().st_mode & 0o004 or path.is_dir())


def can_drop_privileges(root: Path) -> bool:
    import sysconfig

    return os.geteuid() == 0 and all(_reachable_by_others(Path(p)) for p in (
        sys.executable, root, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"]))


def _limit_resources(memory_bytes: int | None, drop_privileges: bool) -> None:
    import ctypes
    import resource

    if drop_privileges:  # run as nobody: no write access to the repository or the grader
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 2**20, 256 * 2**20))
    with contextlib.suppress(Exception):  # die with the grader (PR_SET_PDEATHSIG = 1)
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)


class Worker:
    def __init__(self, submission_request: dict, root: Path, device: str = "cpu",
                 memory_mb: int = 6144, load_timeout: float = 90.0):
        self.submission_request = submission_request
        self.root = root
        self.device = device
        self.memory_bytes = memory_mb * 2**20 if device == "cpu" else None
        self.load_timeout = load_timeout
        self.token = os.urandom(8).hex()
        self.process = None
        self.ready = None  # the load report of the current process
        self.starts = 0

    def _environment(self, home: str) -> dict:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "TMPDIR": home,
               "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "AUTOGRADER_WORKER": self.token}
        for key in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"):
            if self.device != "cpu" and key in os.environ:
                env[key] = os.environ[key]
        return env

    def start(self) -> dict:
        """Start a fresh worker and return its load report (raises WorkerError)."""
        self.close()
        self.starts += 1
        self.home = tempfile.mkdtemp(prefix="autograder-worker-")
        drop = can_drop_privileges(self.root)
        if drop:
            os.chown(self.home, NOBODY, NOBODY)
        self.log_path = Path(self.home) / "worker.log"
        read_fd, write_fd = os.pipe()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-I", str(WORKER_SCRIPT), str(write_fd), str(self.root)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, cwd=self.home,
                env=self._environment(self.home), pass_fds=(write_fd,), start_new_session=True,
                preexec_fn=lambda: _limit_resources(self.memory_bytes, drop),
            )
        os.close(write_fd)
        self.read_fd = read_fd
        self._write({"submission": self.submission_request, "device": self.device})
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
        """One answer, decoded by `autograder.wire` (size-capped, under a time limit)."""
        try:
            return wire.decode(wire.read_frame(self.read_fd, time.monotonic() + timeout))
        except wire.Timeout:
            self.kill()
            raise WorkerError("timeout", f"timed out after {timeout:.0f} s while {doing} "
                                         "(an infinite loop, or far too slow?)") from None
        except wire.Closed:
            code = self.process.wait()
            tail = self.log_tail()
            self.kill()
            raise WorkerError("crash", f"the worker process died while {doing} "
                                       f"(exit code {code}; did the code call os._exit or "
                                       f"sys.exit, or run out of memory?){tail}") from None
        except wire.WireError as exc:
            self.kill()
            raise WorkerError("garbage", f"an answer the grader refuses while {doing}: {exc}") \
                from None

    def log_tail(self, characters: int = 600) -> str:
        with contextlib.suppress(OSError):
            text = self.log_path.read_bytes()[-characters:].decode("utf-8", "replace").strip()
            if text:
                return f"\n  last output of the worker:\n  {text}"
        return ""

    def kill(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                self.process.wait(timeout=10)
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            with contextlib.suppress(OSError):
                os.close(self.read_fd)
            self.process = None
        sweep_strays(self.token)

    def close(self) -> None:
        self.kill()
        home = getattr(self, "home", None)
        if home:
            shutil.rmtree(home, ignore_errors=True)


def sweep_strays(token: str) -> None:
    """Kill any process that still carries this worker's token (a daemon that escaped the group)."""
    marker = f"AUTOGRADER_WORKER={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue
