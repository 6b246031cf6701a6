# attack: hostile answer - a JSON header nested 500,000 deep (a million brackets), and a small one
# of dicts nested 40 deep
# functions: compute_entropy, estimate_kl
# honest: 0
# says: nested deeper than 24
from _worker_wire import wire  # the worker's encoder, as code that took over the worker holds it

DEEP = 500_000
BRACKETS = b'{"d": {"status": "ok", "output": ' + b"[" * DEEP + b"]" * DEEP + b"}}"
DICTS = b'{"d": {"status": "ok", "output": ' + b'{"d": {"a": ' * 40 + b"1" + b"}}" * 40 + b"}}"


def compute_entropy(logits):
    wire.encode = lambda message: len(BRACKETS).to_bytes(4, "little") + BRACKETS
    return logits.sum(-1)


def estimate_kl(new_logprobs, ref_logprobs, *args, **kwargs):
    wire.encode = lambda message: len(DICTS).to_bytes(4, "little") + DICTS
    return new_logprobs - ref_logprobs
