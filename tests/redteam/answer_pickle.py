# attack: hostile answer - a pickle that runs a command in the grader if it unpickles the answer
# functions: compute_entropy
# honest: 0
# says: an answer the grader refuses
import os
import pickle
from pathlib import Path

from _worker_wire import wire  # the worker's encoder, as code that took over the worker holds it

MARK = Path(__file__).resolve().parent / "PWNED_BY_ANSWER_PICKLE"


class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {MARK} /tmp/PWNED_BY_ANSWER_PICKLE",))


def compute_entropy(logits):
    wire.encode = lambda message: pickle.dumps({**message, "output": Payload()})
    return logits.sum(-1)
