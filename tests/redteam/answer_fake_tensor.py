# attack: hostile answer - tensors that claim equality: a subclass whose __eq__, allclose and
# isclose say True, and a header naming a dtype and a tag of its own
# functions: compute_entropy, estimate_kl
# honest: 0
# says: a tensor of dtype 'Agreeable'
import json

import torch
from _worker_wire import wire  # the worker's encoder, as code that took over the worker holds it

HEADER = json.dumps({"d": {"status": "ok", "output": {"T": ["Agreeable", [2]]},
                           "equal": {"__eq__": True}}}).encode()


class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.isclose, torch.Tensor.__eq__):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})

    def __eq__(self, other):
        return True

    def __reduce_ex__(self, protocol):  # what a pickling worker would send instead
        return (torch.ones, (4, 10))


def compute_entropy(logits):
    return torch.full(logits.shape[:-1], float("nan")).as_subclass(Agreeable)


def estimate_kl(new_logprobs, ref_logprobs, *args, **kwargs):
    wire.encode = lambda message: len(HEADER).to_bytes(4, "little") + HEADER + b"\0" * 8
    return new_logprobs - ref_logprobs
