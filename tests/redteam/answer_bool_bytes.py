# attack: hostile answer - a bool tensor whose bytes are 0x07 (neither True nor False), and a
# float tensor followed by a megabyte no descriptor claims
# functions: compute_entropy, estimate_kl
# honest: 0
# says: a bool tensor with bytes other than 0 and 1
import json

from _worker_wire import wire  # the worker's encoder, as code that took over the worker holds it


def _answer(descriptor: list, tail: bytes) -> bytes:
    header = json.dumps({"d": {"status": "ok", "output": {"T": descriptor}}}).encode()
    return len(header).to_bytes(4, "little") + header + tail


def compute_entropy(logits):
    wire.encode = lambda message: _answer(["bool", [4]], b"\x07" * 4)
    return logits.sum(-1)


def estimate_kl(new_logprobs, ref_logprobs, *args, **kwargs):
    wire.encode = lambda message: _answer(["float32", [1]], b"\0" * (4 + 2**20))
    return new_logprobs - ref_logprobs
