"""One memory bound over every process of a grading: a memory cgroup, where the grader may make one.

RLIMIT_AS bounds each process of a stage child alone (`autograder.trusted.sandbox`), so a
submission that forks could use that much in each process. Where the machine lets the grader
create a memory cgroup (cgroup v1's memory hierarchy, or a cgroup v2 subtree whose memory
controller is delegated to it), the template and everything it forks join one, whose limit is what
the template holds once it is ready plus `--memory-mb`: the kernel's OOM killer then ends a stage
child (they have the highest oom_score_adj) when the grading as a whole goes past it (kernel docs:
admin-guide/cgroup-v1/memory.rst, admin-guide/cgroup-v2.rst). Where it may not (a Docker
container: /sys/fs/cgroup is read-only there, as on Gradescope), the container's own memory limit
(`--memory 768m` on Gradescope) is what bounds the grading as a whole.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup")
V1 = CGROUPS / "memory"


def _v2_parent() -> Path | None:
    """This process's own cgroup v2 folder, where its memory controller is delegated to children."""
    with contextlib.suppress(OSError, ValueError):
        line = next(line for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.startswith("0::"))
        own = CGROUPS / line[3:].lstrip("/")
        if "memory" in (own / "cgroup.subtree_control").read_text().split():
            return own
    return None


def create(name: str) -> tuple[Path | None, str]:
    """(a new memory cgroup, "") or (None, why this machine gives the grader none)."""
    parent = V1 if (V1 / "memory.limit_in_bytes").exists() else _v2_parent()
    if parent is None:
        return None, "no memory cgroup hierarchy this grader may write to"
    try:
        path = parent / name
        path.mkdir(mode=0o755)
        return path, ""
    except OSError as exc:
        return None, f"{parent} refuses a new cgroup ({exc.strerror})"


def join(path: Path) -> None:
    """Move this process into `path` (called between fork and exec of the template)."""
    (path / "cgroup.procs").write_text(str(os.getpid()))


def _file(path: Path, v1: str, v2: str) -> Path:
    return path / (v1 if (path / v1).exists() else v2)


def usage(path: Path) -> int:
    return int(_file(path, "memory.usage_in_bytes", "memory.current").read_text())


def limit(path: Path, limit_bytes: int) -> None:
    """Bound RAM (and, in cgroup v1 with swap accounting, RAM plus swap) of all of `path`."""
    _file(path, "memory.limit_in_bytes", "memory.max").write_text(str(limit_bytes))
    for swap in ("memory.memsw.limit_in_bytes", "memory.swap.max"):
        with contextlib.suppress(OSError):
            (path / swap).write_text(str(limit_bytes if swap.startswith("memory.memsw") else 0))


def remove(path: Path) -> None:
    """Remove the cgroup once its processes are gone (they may take a moment to leave)."""
    for _ in range(100):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
