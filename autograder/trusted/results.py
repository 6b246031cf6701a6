"""Writing results.json (Gradescope's format) so that nobody else's file is ever written through it.

results.json often goes to a folder others can write to (/tmp, a shared class folder), where a
link can be planted at its name or at a temporary name next to it. So the file is never opened by
a name someone else could have chosen: it is made by exclusive create (O_CREAT|O_EXCL|O_NOFOLLOW,
mode 0600, then 0644) inside a private folder (mkdtemp: mode 0700, an unguessable name, opened once
and then used only through its descriptor), and renamed into place. A rename replaces a link
planted at results.json instead of following it, and in a sticky folder (/tmp) a link owned by
someone else makes it fail rather than write anywhere.

Every string in the document is escaped (`autograder.trusted.report.escape`): the file is shown to
students and graders, and a string from the submission must not carry terminal control codes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from pathlib import Path

from autograder.trusted.report import escape

MAX_TEXT = 20_000  # characters of one string in results.json (a check's output, a note)


class ResultsError(OSError):
    """results.json could not be written safely (the message names the path and why)."""


def escaped(value):
    """`value` with every string escaped and cut at MAX_TEXT characters."""
    if isinstance(value, str):
        return escape(value, MAX_TEXT)
    if isinstance(value, dict):
        return {escaped(k): escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escaped(v) for v in value]
    return value


def write_results(document: dict, path: str | Path) -> None:
    """Write `document` as JSON to `path`, replacing what is there (a file or a planted link)."""
    path = Path(path).absolute()
    text = json.dumps(escaped(document), indent=2)
    try:
        private = tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent)
    except OSError as exc:
        raise ResultsError(f"cannot write {path}: cannot create a private folder next to it "
                           f"({exc.strerror})") from None
    try:
        folder = os.open(private, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        raise ResultsError(f"cannot write {path}: the private folder {private} was replaced") \
            from None
    try:
        info = os.fstat(folder)
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o700:
            raise ResultsError(f"cannot write {path}: the private folder {private} was tampered "
                               "with")
        descriptor = os.open(path.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=folder)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            os.fchmod(handle.fileno(), 0o644)
        try:
            os.rename(path.name, path, src_dir_fd=folder)
        except OSError as exc:
            hint = (" (in a shared folder such as /tmp, a file or link of that name owned by "
                    "someone else cannot be replaced: choose another --results path)"
                    if exc.errno in (errno.EPERM, errno.EACCES) else "")
            raise ResultsError(f"cannot write {path}: {exc.strerror}{hint}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path.name, dir_fd=folder)
        os.close(folder)
        with contextlib.suppress(OSError):
            os.rmdir(private)
