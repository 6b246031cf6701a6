"""Tier 2's disk budget: a watchdog over the stage children's folders.

Tier 1 bounds what a grading can write by the size of its tmpfs mounts (`isolation.TMPFS_MB`,
1,024 MiB in all). Tier 2 has no mount namespace: a stage child writes into its own folder on the
host's disk, and RLIMIT_FSIZE bounds each file (64 MiB), not their number. So the grader runs this
watchdog beside a tier-2 sandbox (`autograder.trusted.sandbox`). Every `PERIOD` seconds, or four
times the last walk's duration if that is longer, it walks each stage folder (`autograder.untrusted.
cleanup.usage`: iterative, each inode counted once, st_blocks, so fallocate'd and written blocks
count and a sparse file's holes do not) and stops the stage child whose folder holds
  - more than `BUDGET` bytes (tier 1's whole tmpfs), or
  - more than `INODES` files and folders, or
  - more than `SHARE` bytes while the disk has less than `RESERVE` bytes free.
It prints the reason as one JSON line, {"uid": ..., "why": ...}, before it kills every process of
the child's user id, so that the grader has the reason when it sees the child end. A child can
overshoot the budget by what it writes in one period: seccomp refuses fallocate
(`autograder.untrusted.confine`), which reserves gigabytes in microseconds, so blocks must be
written (20 × 64 MiB of posix_fallocate were stopped at 1,029 MiB), and the free-disk check bounds
the rest. The folder itself is deleted by the template's reap as always.

    python diskwatch.py STAGES_FOLDER
"""

from __future__ import annotations

import json
import os
import sys
import time

if __name__ == "__main__":  # run as a script: the package is two folders up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from autograder.protocol import cleanup  # noqa: E402
from autograder.trusted.isolation import TMPFS_MB  # noqa: E402

BUDGET = sum(TMPFS_MB.values()) * 2**20  # bytes: what tier 1 lets a grading write, 1,024 MiB
INODES = 100_000  # files and folders in one stage's folder
RESERVE = 512 * 2**20  # bytes the machine's disk keeps free
SHARE = 16 * 2**20  # a child holding less is not the one filling the disk
PERIOD = 0.2  # seconds between walks, at least


def verdict(folder: str) -> str | None:
    """Why the child of `folder` must stop, or None."""
    used, entries, too_many = cleanup.usage(folder, INODES)
    if too_many:
        return f"it made more than {INODES:,} files and folders (tier 2's bound)"
    if used > BUDGET:
        return (f"it wrote {used >> 20} MiB to disk, more than the {BUDGET >> 20} MiB a stage may "
                "write")
    disk = os.statvfs(folder)
    if used > SHARE and disk.f_bavail * disk.f_frsize < RESERVE:
        return (f"it wrote {used >> 20} MiB to disk while the machine's disk had less than "
                f"{RESERVE >> 20} MiB free")
    return None


def watch(stages: str) -> None:
    parent = os.getppid()
    told: set[tuple[int, int]] = set()  # (uid, the folder's inode): each child's folder once
    while os.getppid() == parent:  # the grader ended: so does its watchdog
        started = time.monotonic()
        try:
            names = [name for name in os.listdir(stages) if name.isdigit()]
        except FileNotFoundError:
            return
        for name in names:
            folder = os.path.join(stages, name)
            try:
                identity = (int(name), os.lstat(folder).st_ino)
                why = None if identity in told else verdict(folder)
            except OSError:
                continue  # deleted meanwhile: its child ended
            if why:
                told.add(identity)
                print(json.dumps({"uid": int(name), "why": why}), flush=True)
                cleanup.kill_users(range(int(name), int(name) + 1))
        time.sleep(max(PERIOD, 4 * (time.monotonic() - started)))


if __name__ == "__main__":
    watch(sys.argv[1])
