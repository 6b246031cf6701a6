# attack: hostile answer - a header that is one 2-million-digit integer (quadratic to convert), and
# an answer trickled out a byte every half second
# functions: compute_entropy, estimate_kl
# honest: 0
# says: a number of 1,999,900 digits
import os
import time

from _worker_wire import wire  # the worker's framing, as code that took over the worker holds it

HEADER = b'{"d": {"status": "ok", "output": ' + b"7" * (2 * 10**6 - 100) + b"}}"


def _trickle(fd, payload):
    for byte in len(payload).to_bytes(8, "little") + payload:
        os.write(fd, bytes([byte]))
        time.sleep(0.5)


def compute_entropy(logits):
    wire.encode = lambda message: len(HEADER).to_bytes(4, "little") + HEADER
    return logits.sum(-1)


def estimate_kl(new_logprobs, ref_logprobs, *args, **kwargs):
    wire.write_frame = _trickle
    return new_logprobs - ref_logprobs
