# attack: hostile answer - a 2 MB header of 690,000 empty lists, and one of 300,000 keys
# functions: compute_entropy, estimate_kl
# honest: 0
# says: more than 50,000 values
import json

from _worker_wire import wire  # the worker's encoder, as code that took over the worker holds it

LISTS = b'{"d": {"status": "ok", "output": [' + b"[]," * 690_000 + b"[]]}}"
KEYS = json.dumps({"d": {"status": "ok", "output": {"d": {str(i): 0 for i in range(300_000)}}}})


def compute_entropy(logits):
    wire.encode = lambda message: len(LISTS).to_bytes(4, "little") + LISTS
    return logits.sum(-1)


def estimate_kl(new_logprobs, ref_logprobs, *args, **kwargs):
    wire.encode = lambda message: len(KEYS).to_bytes(4, "little") + KEYS.encode()
    return new_logprobs - ref_logprobs
