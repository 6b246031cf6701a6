# attack: hostile answer - a JSON header nested 500,000 deep, and a return value nested 100,000 deep
# functions: compute_entropy, estimate_kl
# honest: 0
# says: more than 50,000 values
from autograder import wire  # the worker's own encoder: code in the worker may replace it

DEEP = 500_000
HEADER = b'{"d": {"status": "ok", "output": ' + b"[" * DEEP + b"]" * DEEP + b"}}"


def compute_entropy(logits):
    wire.encode = lambda message: len(HEADER).to_bytes(4, "little") + HEADER
    return logits.sum(-1)


def estimate_kl(new_logprobs, ref_logprobs, *args, **kwargs):
    nested = new_logprobs
    for _ in range(100_000):
        nested = [nested]
    return nested
