"""GRPO, one stage at a time: the course's reference solutions.

Pipeline order (one module per concept, at the top of the package):
  tokenization → scoring → advantages → losses → off_policy → aggregation → train_step
with what they need beside them (chunked_head, metrics, distributed, variants, registry, paths) and
`train`, the command line (`python -m course.train`). The support code is in sub-packages:
`course.loop` (the trainer, the tiny OLMo2 and its tokenizer, tasks, rollouts, plotting),
`course.lab` (notebook 08's experiments), `course.frontier` (notebook 11's ungraded losses) and
`course.submissions` (the learner's own notebooks, read without running them).
Every graded function (listed in `course.registry`) is importable from here: `from course import
grpo_train_step`. The names load lazily (PEP 562 module `__getattr__`): `import course.cli` does not
import torch, so a command line answers a usage error before torch loads.
"""

from __future__ import annotations

import importlib

from course.registry import (  # what is graded, by stage, in order
    GRADED_FUNCTIONS,
    HOME_MODULES,
    STAGES,
)

# Where each name of `__all__` lives: the graded functions in their stage's module, and helpers.
_HOMES = {
    **HOME_MODULES,
    "GRPOLossConfig": "course.off_policy",
    "LossStatistics": "course.metrics",
    "calculate_loss_and_backward": "course.aggregation",
    "compare_logprobs": "course.metrics",
    "masked_mean": "course.aggregation",
}

__all__ = [*GRADED_FUNCTIONS, "GRADED_FUNCTIONS", "STAGES",
           *sorted(set(_HOMES) - set(HOME_MODULES))]


def __getattr__(name: str):
    """A name of `__all__` from its home module, or a submodule (`course.advantages`), on first
    use."""
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name not in (None, f"{__name__}.{name}"):  # a module it imports is missing
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
