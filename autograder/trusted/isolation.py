"""What the worker sees and may do: a bubblewrap sandbox (https://github.com/containers/bubblewrap).

The worker sees the system (/usr, /etc), the Python environment and the grader's own package
`autograder/` read-only, with its stored expected values hidden under an empty tmpfs; not the
project (no `course/`, `solutions/`, `tests/`, `.git`), not the fixtures, not other users' files.
It gets a private /tmp, /dev/shm and home (size-bounded tmpfs: this is all the disk it can fill),
no network (a new network namespace with only loopback), no view of the grader's processes or
command line (a new PID namespace, its own /proc), a new session (no terminal to push keys into),
and it dies with the grader, all its descendants included (--die-with-parent, and the PID
namespace ends with its first process). Inside, each stage's child runs under its own user id with
no capabilities (see `autograder.untrusted.worker`), so nothing it writes can outlive the grading.

Where bubblewrap cannot start (macOS, no `bwrap`, a container without namespaces), the grader runs
the worker as a plain subprocess and marks the grade PRACTICE; an `--official` run refuses.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

HOME = "/home/student"
TMPFS_MB = {"/tmp": 512, "/dev/shm": 256, HOME: 256}  # the worker's whole writable disk
SYSTEM = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL")  # the template's, to start and end children


def environment(home: str, device: str) -> dict:
    """The worker's whole environment (nothing of the grader's leaks in)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": "/tmp" if home == HOME
           else home, "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": f"{home}/.hf", "MPLCONFIGDIR": f"{home}/.mpl", "PYTHONDONTWRITEBYTECODE": "1",
           "GLOO_SOCKET_IFNAME": "lo"}
    for key in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"):
        if device != "cpu" and key in os.environ:
            env[key] = os.environ[key]
    return env


def _inside(path: Path, folders) -> bool:
    return any(path == f or f in path.parents for f in folders)


def python_folders(root: Path) -> list[Path]:
    """The interpreter and its packages: everything on sys.path except the project itself."""
    candidates = {Path(sys.base_prefix), Path(sys.prefix), Path(os.path.realpath(sys.executable)).parent.parent}
    candidates.update(Path(p) for p in sys.path if p and Path(p).is_dir())
    keep = [p.resolve() for p in candidates
            if p.resolve() != root and p.resolve() not in root.parents
            and (not _inside(p.resolve(), [root]) or _inside(p.resolve(), [Path(sys.prefix).resolve()]))]
    system = [Path("/", name) for name in SYSTEM]
    keep = [p for p in keep if not _inside(p, system)]
    return sorted(p for p in set(keep) if not _inside(p, [q for q in keep if q != p]))


def bwrap_command(root: Path, visible=(), device: str = "cpu") -> list[str]:
    """The bubblewrap command line that precedes the worker's own."""
    command = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--new-session",
               "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
               "--unshare-cgroup-try", "--hostname", "sandbox"]
    if os.geteuid() == 0:  # privileged: keep only what the template needs to start children
        command += ["--cap-drop", "ALL"]
        for capability in CAPABILITIES:
            command += ["--cap-add", capability]
    else:
        command += ["--unshare-user"]
    for name in SYSTEM:
        path = Path("/", name)
        if path.is_symlink():
            command += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            command += ["--ro-bind", str(path), str(path)]
    command += ["--dev", "/dev", "--proc", "/proc", "--ro-bind-try", "/sys", "/sys"]  # gloo, cpuinfo
    for path, megabytes in TMPFS_MB.items():
        command += ["--perms", "1777", "--size", str(megabytes * 2**20), "--tmpfs", path]
    mounts = python_folders(root) + [root / "autograder"] + [Path(p).resolve() for p in visible]
    made = {Path(p) for p in TMPFS_MB} | {Path(p).parent for p in TMPFS_MB}
    for mount in mounts:  # parents made world-traversable (a 0700 home must not hide Python)
        for parent in reversed(mount.parents):
            if parent != Path("/") and parent not in made and not _inside(parent, mounts) \
                    and not _inside(parent, [Path("/", n) for n in SYSTEM]):
                command += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
    for mount in mounts:
        command += ["--ro-bind", str(mount), str(mount)]
    fixtures = root / "autograder" / "fixtures"
    if fixtures.is_dir():  # the stored expected values: hidden
        command += ["--size", str(2**20), "--tmpfs", str(fixtures)]
    if device != "cpu":  # GPU passthrough
        command += ["--ro-bind-try", "/proc/driver/nvidia", "/proc/driver/nvidia"]
        for node in sorted(Path("/dev").glob("nvidia*")):
            command += ["--dev-bind", str(node), str(node)]
    command += ["--chdir", HOME, "--clearenv"]
    for key, value in environment(HOME, device).items():
        command += ["--setenv", key, value]
    return command


@functools.cache
def sandbox_problem(root: Path) -> str | None:
    """None when a bubblewrap sandbox starts here, else why not (in a user's words)."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux; this is {sys.platform}"
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian/Ubuntu: `apt-get install -y bubblewrap`)"
    try:
        done = subprocess.run(bwrap_command(root) + [sys.executable, "-I", "-S", "-c", "pass"],
                              capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start ({exc})"
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip()[-300:]
        return f"bubblewrap could not start a sandbox here ({reason or f'exit {done.returncode}'})"
    return None
