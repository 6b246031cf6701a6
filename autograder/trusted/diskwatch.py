"""Tier 2's disk budget: a watchdog over what the stage children hold on disk.

Tier 1 bounds what a grading can write by the size of its tmpfs mounts (`isolation.TMPFS_MB`,
1,024 MiB in all). Tier 2 has no mount namespace: a stage child writes into its own folder on the
host's disk, and RLIMIT_FSIZE bounds each file (64 MiB), not their number. So the grader runs this
watchdog beside a tier-2 sandbox (`autograder.trusted.sandbox`). Every `PERIOD` seconds, or four
times the last walk's duration if that is longer, it counts what each stage child holds on disk:
its folder (`autograder.protocol.cleanup.usage`: iterative, each inode counted once, st_blocks, so
fallocate'd and written blocks count and a sparse file's holes do not), and the files on that disk
that a process of the child's user id holds open or mapped (/proc/PID/fd, /proc/PID/map_files,
proc(5)) though no folder holds them any more (deleted: st_nlink 0), and stops the child that holds
  - more than `BUDGET` bytes (tier 1's whole tmpfs), or
  - more than `INODES` files and folders, or
  - more than `SHARE` bytes while the disk has less than `RESERVE` bytes free, or
  - more than `SHARE` bytes while the disk's free space has fallen by more than `BUDGET` since the
    child's folder was first seen (a child holding less is not the one filling the disk: another
    grading's writes never stop an honest stage).
It prints the reason as one JSON line, {"uid": ..., "why": ...}, before it kills every process of
the child's user id (which frees its deleted files), so that the grader has the reason when it sees
the child end. A child can overshoot the budget by what it writes between two looks: seccomp
refuses fallocate (`autograder.untrusted.confine`), which reserves gigabytes in microseconds, so
blocks must be written, each file is at most 64 MiB (RLIMIT_FSIZE) and a process holds at most
`sandbox.CHILD_FILES` descriptors (RLIMIT_NOFILE): 20 × 64 MiB of posix_fallocate were stopped at
1,029 MiB, 20 files of 64 MiB deleted as soon as made and held open at 1,063 MiB
(`tests/test_sandbox.py` holds it to 256 MiB over). The folder itself is deleted by the template's
reap as always.

    python diskwatch.py STAGES_FOLDER
"""

from __future__ import annotations

import json
import os
import stat
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


def deleted_but_held(uid: int, device: int) -> int:
    """Bytes of the files on `device` that processes of `uid` hold open or mapped though no folder
    holds them (st_nlink 0: deleted, so no walk finds them), each inode once, by st_blocks."""
    seen, held = set(), 0
    for pid in cleanup.processes_of(range(uid, uid + 1)):
        for kind in ("fd", "map_files"):
            try:
                names = os.listdir(f"/proc/{pid}/{kind}")
            except OSError:
                continue  # ended meanwhile
            for name in names:
                try:
                    info = os.stat(f"/proc/{pid}/{kind}/{name}")
                except OSError:
                    continue
                if info.st_dev == device and stat.S_ISREG(info.st_mode) and not info.st_nlink \
                        and info.st_ino not in seen:
                    seen.add(info.st_ino)
                    held += info.st_blocks * 512
    return held


def free_bytes(folder: str) -> int:
    disk = os.statvfs(folder)
    return disk.f_bavail * disk.f_frsize


def verdict(folder: str, uid: int | None = None, free_at_start: int | None = None) -> str | None:
    """Why the child of `folder` (of user `uid`, where the disk had `free_at_start` bytes free
    when it started) must stop, or None."""
    used, entries, too_many = cleanup.usage(folder, INODES)
    if too_many:
        return f"it made more than {INODES:,} files and folders (tier 2's bound)"
    deleted = deleted_but_held(uid, os.stat(folder).st_dev) if uid is not None else 0
    used += deleted
    held = f"it held {used >> 20} MiB on disk"
    deleted_note = (f" ({deleted >> 20} MiB of it in files it deleted but holds open)"
                    if deleted >> 20 else "")
    free = free_bytes(folder)
    if used > BUDGET:
        why = f"more than the {BUDGET >> 20} MiB a stage may write"
    elif used > SHARE and free < RESERVE:
        why = f"while the machine's disk had less than {RESERVE >> 20} MiB free"
    elif used > SHARE and free_at_start is not None and free_at_start - free > BUDGET:
        why = (f"while the disk's free space fell by {(free_at_start - free) >> 20} MiB, more "
               f"than the {BUDGET >> 20} MiB a stage may write")
    else:
        return None
    return f"{held}, {why}{deleted_note}"


def watch(stages: str) -> None:
    parent = os.getppid()
    told: set[tuple[int, int]] = set()  # (uid, the folder's inode): each child's folder once
    free: dict[tuple[int, int], int] = {}  # the disk's free bytes when each folder was first seen
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
                start = free.setdefault(identity, free_bytes(folder))
                why = None if identity in told else verdict(folder, int(name), start)
            except OSError:
                continue  # deleted meanwhile: its child ended
            if why:
                told.add(identity)
                print(json.dumps({"uid": int(name), "why": why}), flush=True)
                cleanup.kill_users(range(int(name), int(name) + 1))
        time.sleep(max(PERIOD, 4 * (time.monotonic() - started)))


if __name__ == "__main__":
    watch(sys.argv[1])
