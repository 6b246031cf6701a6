"""Helpers shared by the check modules: seeded input makers and reference calls.

Every use of the reference goes through `reference_function`, so a stored-only grading (the
student edition) never computes with it (`core.require_reference`)."""

from __future__ import annotations

import random

import torch

from autograder.protocol.markers import resolve
from autograder.trusted.core import one_thread, require_reference
from autograder.trusted.reference import reference


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rng(seed: int) -> random.Random:
    return random.Random(seed)


def reference_function(name: str):
    """The reference of graded function `name` (NeedsReference in a stored-only grading)."""
    require_reference(f"the reference {name}")
    return reference(name)


def run_reference(name: str, inputs: dict):
    """The reference's answer on `inputs` (markers resolved), computed in this trusted process."""
    function = reference_function(name)
    with one_thread():
        return function(**resolve(inputs))


def reference_gradient(name: str, inputs: dict, wrt: str, path,
                       cotangent: torch.Tensor) -> torch.Tensor:
    """d<output[path] · cotangent>/d inputs[wrt] of the reference, by autograd (stored with the
    case, so that no check holds a formula of its own for it)."""
    leaf = inputs[wrt].detach().clone().requires_grad_(True)
    output = run_reference(name, {**inputs, wrt: leaf})
    output = output[path] if path is not None else output
    (grad,) = torch.autograd.grad((output * cotangent).sum(), leaf)
    return grad.detach()


def ragged_mask(batch: int, positions: int, g: torch.Generator,
                empty_row: bool = False) -> torch.Tensor:
    """A 0/1 (B, T) mask: each row a run of response tokens after a prompt, lengths differing."""
    mask = torch.zeros(batch, positions, dtype=torch.long)
    for row in range(batch):
        start = int(torch.randint(0, positions // 2, (1,), generator=g))
        length = int(torch.randint(1, positions - start + 1, (1,), generator=g))
        mask[row, start:start + length] = 1
    if empty_row:
        mask[-1] = 0
    return mask
