# attack: hostile answer - 8 bytes on the wire that describe a (2**24, 2**24) float64 tensor (2 EiB)
# functions: compute_entropy
# honest: 0
# says: needs 2,251,799,813,685,248 bytes
import json

from _worker_wire import wire  # the worker's encoder, as code that took over the worker holds it

HEADER = json.dumps({"d": {"status": "ok", "output": {"T": ["float64", [2**24, 2**24]]},
                           "requires_grad": {"d": {"": False}}}}).encode()
ANSWER = len(HEADER).to_bytes(4, "little") + HEADER + b"\0" * 8


def compute_entropy(logits):
    wire.encode = lambda message: ANSWER
    return logits.sum(-1)
