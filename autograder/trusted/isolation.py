"""What the worker sees and may do: two tiers of isolation, the first one that starts here.

Tier 1, "bubblewrap" (https://github.com/containers/bubblewrap): the worker sees the system
(/usr, /etc), the Python environment and the grader's own package `autograder/` read-only, with
its stored expected values hidden under an empty tmpfs; not the project (no `course/`,
`solutions/`, `tests/`, `.git`), not the fixtures, not other users' files. It gets a private /tmp,
/dev/shm and home (size-bounded tmpfs: this is all the disk it can fill), no network (a new
network namespace with only loopback), no view of the grader's processes or command line (a new
PID namespace, its own /proc), a new session (no terminal to push keys into), and it dies with the
grader, all its descendants included (--die-with-parent, and the PID namespace ends with its first
process). Inside, each stage's child runs under its own user id with no capabilities and a
seccomp filter (see `autograder.untrusted.worker`), and what it wrote in /tmp, /dev/shm and home
is wiped before the next stage's child starts.

Tier 2, "landlock-seccomp", where namespaces are refused (a Docker container with Docker's default
seccomp profile and no CAP_SYS_ADMIN, as on Gradescope): the template runs as a plain process
(root, to give each child its own user id) and each stage child takes its own unprivileged user
id, no capabilities, PR_SET_NO_NEW_PRIVS, rlimits, then Landlock and seccomp
(`autograder.untrusted.confine`): read-only system, Python and the worker's modules
(`landlock_read_only`), one private read-write folder (its home and tmp, deleted when it ends),
no TCP, no socket() at all (Landlock does not mediate connect() to a unix socket's path; a stream
socketpair stays), no signals or abstract unix sockets out of its own domain.
What tier 2 does NOT give: no PID namespace (its processes are on the host's /proc, though
Landlock does not let it read /proc, and it can still stat a path it guesses, without reading or
listing it), no network namespace (only seccomp and Landlock stand between it and the machine's
network: the socketpairs it makes, nothing else), no IPC namespace (SysV IPC is refused by
seccomp instead), no mount namespace (the disk it can fill is bounded by RLIMIT_FSIZE per file and
by a watchdog on its folder, `autograder.trusted.diskwatch`, not by a tmpfs), and no death with
the grader for a daemon if the grader is SIGKILLed (the grader kills every process of its user ids
when it closes; the template's children die with it).
Data-parallel training needs gloo's TCP transport: in tier 2 the child of its stage forks its ranks
before the submission loads, they connect their mesh over loopback and then take the same no-TCP,
no-socket confinement (`autograder.untrusted.ranks`); student code opens no connection.
Tier 2 needs root (to switch user ids) and Landlock; without Landlock it is refused, saying why.

Where neither tier starts (macOS, no `bwrap` and no Landlock), the grader runs the worker as a
plain subprocess and marks the grade PRACTICE; an `--official` run refuses.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
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
    candidates = {Path(sys.base_prefix), Path(sys.prefix),
                  Path(os.path.realpath(sys.executable)).parent.parent}
    candidates.update(Path(p) for p in sys.path if p and Path(p).is_dir())
    keep = [p.resolve() for p in candidates
            if p.resolve() != root and p.resolve() not in root.parents
            and (not _inside(p.resolve(), [root]) or _inside(p.resolve(),
                                                             [Path(sys.prefix).resolve()]))]
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
    # gloo, cpuinfo
    command += ["--dev", "/dev", "--proc", "/proc", "--ro-bind-try", "/sys", "/sys"]
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


TIERS = {"auto": ("bubblewrap", "landlock-seccomp"), "bubblewrap": ("bubblewrap",),
         "landlock": ("landlock-seccomp",)}  # `--isolation` -> the tiers it may use, in order
CHECK_UID = 65534  # nobody: the tier-2 self-test confines itself as a stage child would


@functools.cache
def isolation_tier(root: Path, choice: str = "auto") -> tuple[str | None, str | None]:
    """("bubblewrap" | "landlock-seccomp", None): the first tier of `choice` that holds here, or
    (None, why none does). Raises ValueError for an unknown `choice`."""
    if choice not in TIERS:
        raise ValueError(f"--isolation {choice!r}: choose one of {', '.join(TIERS)}")
    problems = []
    for tier in TIERS[choice]:
        problem = bubblewrap_problem(root) if tier == "bubblewrap" else landlock_problem(root)
        if problem is None:
            return tier, None
        problems.append(problem)
    return None, "; ".join(problems)


def sandbox_problem(root: Path, choice: str = "auto") -> str | None:
    """None when a tier of `choice` isolates the worker here, else why not (in a user's words)."""
    return isolation_tier(root, choice)[1]


def landlock_read_only(root: Path, visible=()) -> list[str]:
    """What a tier-2 child may read: the system, Python, the worker's own modules (not the
    grader's `trusted/`, not the fixtures) and the folders the submission needs."""
    package = root / "autograder"
    folders = [Path("/", name) for name in SYSTEM] + python_folders(root) + \
        [package / "untrusted", package / "protocol", Path("/sys"), Path("/dev/urandom"),
         Path("/dev/random")] + [Path(p).resolve() for p in visible]
    return [str(p) for p in folders if p.exists()]


@functools.cache
def landlock_problem(root: Path) -> str | None:
    """None when tier 2 holds here (a child confines itself and is refused what it must be),
    else why not."""
    if not sys.platform.startswith("linux"):
        return f"Landlock needs Linux; this is {sys.platform}"
    if os.geteuid() != 0:
        return "tier 2 (Landlock and seccomp) gives each stage its own user id, which needs root"
    private = tempfile.mkdtemp(prefix="autograder-check-")
    try:
        os.chown(private, CHECK_UID, CHECK_UID)
        done = subprocess.run([sys.executable, "-I", "-B", str(root / "autograder" / "untrusted" /
                                                               "confine.py"), "--check", private,
                               str(root / "autograder" / "trusted" / "isolation.py")],
                              capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
                              user=CHECK_UID, group=CHECK_UID, extra_groups=[])
        seen = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except PermissionError:
        return (f"tier 2's stage users cannot run this Python ({sys.executable}: a folder above it "
                "is private to its owner); install the grader's Python where every user can "
                "read it (e.g. /usr/bin/python3 and a virtualenv outside /root)")
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return f"tier 2 could not be checked ({type(exc).__name__}: {exc})"
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if "error" in seen:
        hint = " (pip install pyseccomp)" if "pyseccomp" in seen["error"] else ""
        return f"Landlock and seccomp could not confine a stage here: {seen['error']}{hint}"
    wrong = [name for name, want in (("write_private", True), ("read_forbidden", False),
                                     ("inet_socket", False), ("unix_socket", False),
                                     ("unshare", False), ("fork", True))
             if seen.get(name) is not want]
    if wrong:
        return f"Landlock and seccomp did not confine a stage as they must here: {wrong}"
    return None


@functools.cache
def bubblewrap_problem(root: Path) -> str | None:
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
