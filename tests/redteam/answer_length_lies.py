# attack: hostile answer - a frame whose length prefix claims 2**62 bytes, then silence
# functions: compute_entropy
# honest: 0
# says: an answer of 4,611,686,018,427,387,904 bytes
import os

from _worker_wire import wire  # the worker's framing, as code that took over the worker holds it


def _lie(fd, payload):
    os.write(fd, (2**62).to_bytes(8, "little") + payload[:1024])


def compute_entropy(logits):
    wire.write_frame = _lie
    return logits.sum(-1)
