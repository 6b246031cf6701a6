"""The worker's encoder and framing, as code that took over the stage child would hold them.

The grader's own modules are out of a submission's reach, so the answer attacks model a worker
whose code is replaced: setting `wire.encode` or `wire.write_frame` here sends one answer at once,
on the stage's answer pipe, made by what was set (the real encoder and framing for the other).
The grader must decode it as hostile bytes, whatever the worker runs.
"""

import fcntl
import os
import stat

from autograder.protocol import wire as _real  # a copy of the wire, its format the same


def _answer_pipe() -> int:
    """The stage child's only pipe open for writing: its answers."""
    for fd in range(3, 1024):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) \
                    and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                return fd
        except OSError:
            continue
    raise RuntimeError("no answer pipe")


class _Wire:
    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        encode = vars(self).get("encode", _real.encode)
        write_frame = vars(self).get("write_frame", _real.write_frame)
        write_frame(_answer_pipe(), encode({"status": "ok", "output": None}))


wire = _Wire()
