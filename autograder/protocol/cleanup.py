"""Deleting and measuring a folder a submission wrote: an iterative walk, never a recursion.

`shutil.rmtree` recurses once per level (a chain of 3,000 nested folders raises RecursionError)
and `os.fwalk` holds a descriptor per level. Here one folder is open at a time: the walk goes down
with openat(O_NOFOLLOW) relative to the open folder and back up through "..", checking that ".."
is the folder it came from (same device and inode), so neither a symlink nor a moved folder can
lead it outside. Nothing in the tree may run meanwhile (the template and the grader walk only a
stage's folder whose processes are dead); the walk is bounded by `ENTRIES` entries all the same,
and reports what stopped it instead of raising.

Used by the template (`autograder.untrusted.worker`: a stage child's folder and tier 1's /tmp,
/dev/shm and home after each child), the grader (`autograder.trusted.sandbox`: the sandbox's
folders when it closes) and the disk watchdog (`autograder.trusted.diskwatch`: `usage`), which
also end every process of a user id with `kill_users` (tier 2 has no PID namespace).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import time

ENTRIES = 2_000_000  # the most entries one walk visits (tier 2's inode bound is far below)
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Walk:
    """One folder's tree, visited bottom-up with one descriptor open at a time."""

    def __init__(self, path: str, entries: int = ENTRIES):
        self.path, self.entries, self.seen = path, entries, 0

    def run(self, on_file, on_folder) -> str | None:
        """Call `on_file(dir_fd, name, stat)` for each non-folder, then `on_folder(dir_fd, name)`
        for each folder once its contents are done (the top one excluded); None when the whole
        tree was visited, else why not."""
        try:
            fd = os.open(self.path, DIRECTORY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{self.path} could not be opened ({exc.strerror})"
        # each level: (its name in its parent, (device, inode), the sub-folders still to visit)
        levels = [("", _identity(os.fstat(fd)), None)]
        try:
            while True:
                name, identity, pending = levels[-1]
                if pending is None:
                    try:
                        pending = self._visit(fd, on_file)
                    except OSError as exc:
                        return f"a folder under {self.path} could not be read ({exc.strerror})"
                    if isinstance(pending, str):
                        return pending
                    levels[-1] = (name, identity, pending)
                if pending:
                    child = pending.pop()
                    try:
                        below = os.open(child, DIRECTORY, dir_fd=fd)
                    except OSError:
                        continue  # gone, or no longer a folder: on_file saw it, or nothing to do
                    os.close(fd)
                    fd = below
                    levels.append((child, _identity(os.fstat(fd)), None))
                    continue
                if len(levels) == 1:
                    return None
                parent = os.open("..", DIRECTORY, dir_fd=fd)
                if _identity(os.fstat(parent)) != levels[-2][1]:
                    os.close(parent)
                    return f"a folder under {self.path} was moved while it was cleaned"
                os.close(fd)
                fd = parent
                levels.pop()
                on_folder(fd, name)
        except OSError as exc:
            return f"{self.path} could not be walked ({exc.strerror})"
        finally:
            os.close(fd)

    def _visit(self, fd: int, on_file) -> list[str] | str:
        """The folder's sub-folders; its other entries go to `on_file`."""
        folders = []
        with os.scandir(fd) as entries:
            for entry in entries:
                self.seen += 1
                if self.seen > self.entries:
                    return f"{self.path} holds more than {self.entries:,} entries"
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    if info.st_mode & 0o700 != 0o700:  # a folder its owner made unreadable
                        with contextlib.suppress(OSError):  # not ours: left, and told at the top
                            os.chmod(entry.name, 0o700, dir_fd=fd)
                    folders.append(entry.name)
                else:
                    on_file(fd, entry.name, info)
        return folders


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _unlink(fd: int, name: str, info) -> None:
    with contextlib.suppress(OSError):  # another user's file in a shared /tmp stays
        os.unlink(name, dir_fd=fd)


def _rmdir(fd: int, name: str) -> None:
    with contextlib.suppress(OSError):  # not empty: something in it was not ours
        os.rmdir(name, dir_fd=fd)


def empty(path: str, entries: int = ENTRIES) -> str | None:
    """Delete everything inside the folder `path` (kept); None when done, else why not."""
    return Walk(path, entries).run(_unlink, _rmdir)


def remove(path: str, entries: int = ENTRIES) -> str | None:
    """Delete the folder `path` and everything in it (never following a link); None when done or
    when it did not exist, else why not."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return None
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} could not be removed ({exc.strerror})"
    why = empty(path, entries)
    if why is None:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            why = f"{path} could not be removed ({exc.strerror})"
    return why


def usage(path: str, entries: int) -> tuple[int, int, str | None]:
    """(bytes of disk, entries) under `path`, each inode counted once, stopping after `entries`
    entries (then the third value says so)."""
    inodes: set[tuple[int, int]] = set()
    total = [0]

    def count(fd: int, name: str, info) -> None:
        if _identity(info) not in inodes:
            inodes.add(_identity(info))
            total[0] += info.st_blocks * 512

    walk = Walk(path, entries)
    why = walk.run(count, lambda fd, name: None)
    return total[0], walk.seen, why


def processes_of(uids: range) -> list[int]:
    """The live processes on this machine's /proc whose real user id is in `uids`."""
    found = []
    for entry in os.listdir("/proc") if uids else ():
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry}/status", "rb") as handle:
                    fields = dict(line.split(b":", 1) for line in handle if b":" in line)
                if fields[b"State"].split()[0] != b"Z" and int(fields[b"Uid"].split()[0]) in uids:
                    found.append(int(entry))
    return found


def kill_users(uids: range) -> None:
    """SIGKILL every process of `uids`, again until none is left (a fork bomb forks meanwhile)."""
    for _ in range(200):
        found = processes_of(uids)
        if not found:
            return
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
