"""The trusted reference: `course`'s graded functions, looked up by name.

Both sides use this: the parent computes expected values with it, and the worker wraps it with a
call counter so that a graded function that merely calls the reference of the same name is caught.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import pkgutil
import sys
from collections import Counter

GRADED_FUNCTIONS = (
    "tokenize_prompt_and_output", "compute_entropy", "get_response_log_probs",
    "compute_rollout_rewards", "compute_group_normalized_rewards",
    "compute_policy_gradient_loss", "compute_grpo_loss", "estimate_kl",
    "truncated_importance_weights", "aggregate_loss_across_microbatch", "grpo_train_step",
)
STAGES = {
    "1_tokenization": ("tokenize_prompt_and_output",),
    "2_scoring": ("compute_entropy", "get_response_log_probs"),
    "3_advantages": ("compute_rollout_rewards", "compute_group_normalized_rewards"),
    "4_losses": ("compute_policy_gradient_loss", "compute_grpo_loss", "estimate_kl",
                 "truncated_importance_weights"),
    "5_aggregation": ("aggregate_loss_across_microbatch",),
    "6_train_step": ("grpo_train_step",),
}
STAGE_OF = {name: stage for stage, names in STAGES.items() for name in names}
# Where each graded function lives inside `course` (used before `course` re-exports them all).
HOME_MODULES = {
    "tokenize_prompt_and_output": "course.tokenization", "compute_entropy": "course.scoring",
    "get_response_log_probs": "course.scoring", "compute_rollout_rewards": "course.advantages",
    "compute_group_normalized_rewards": "course.advantages",
    "compute_policy_gradient_loss": "course.losses", "compute_grpo_loss": "course.losses",
    "estimate_kl": "course.losses", "truncated_importance_weights": "course.losses",
    "aggregate_loss_across_microbatch": "course.aggregation", "grpo_train_step": "course.train_step",
}


def reference(name: str):
    """The reference implementation of graded function `name`."""
    return getattr(importlib.import_module(HOME_MODULES[name]), name)


def import_course_modules() -> list:
    import course
    modules = [course]
    for info in pkgutil.iter_modules(course.__path__, "course."):
        if info.name in set(HOME_MODULES.values()):
            modules.append(importlib.import_module(info.name))
    return modules


def reference_wrappers(counter: Counter) -> dict:
    """{reference function: counting wrapper}, one per graded function."""
    wrappers = {}
    for name in GRADED_FUNCTIONS:
        ref = reference(name)

        def wrapper(*args, __name=name, __ref=ref, **kwargs):
            counter[__name] += 1
            return __ref(*args, **kwargs)

        wrappers[ref] = functools.update_wrapper(wrapper, ref)
        wrapper.__grader_reference__ = name
    return wrappers


def install_counters(wrappers: dict, namespaces=()) -> list:
    """Replace every binding of a reference function in `course` modules (and `namespaces`)."""
    replaced = []
    targets = [vars(m) for m in import_course_modules()] + list(namespaces)
    for namespace in targets:
        for key, value in list(namespace.items()):
            try:
                wrapper = wrappers.get(value)
            except TypeError:  # unhashable value
                continue
            if wrapper is not None:
                namespace[key] = wrapper
                replaced.append((namespace, key, value))
    return replaced


@contextlib.contextmanager
def counting_calls(counter: Counter, namespaces=()):
    """Count reference calls while the block runs, then restore every binding (in-process mode)."""
    replaced = install_counters(reference_wrappers(counter), namespaces)
    try:
        yield
    finally:
        for namespace, key, value in replaced:
            namespace[key] = value


def is_reference(function, name: str) -> bool:
    ref = reference(name)
    seen = function
    for _ in range(5):  # follow functools.wraps chains
        if seen is ref or getattr(seen, "__grader_reference__", None) == name:
            return True
        seen = getattr(seen, "__wrapped__", None)
        if seen is None:
            return False
    return False


def loaded_course() -> bool:
    return "course" in sys.modules
