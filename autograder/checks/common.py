"""Helpers shared by the check modules: seeded input makers and reference calls."""

from __future__ import annotations

import random

import torch

from autograder.core import one_thread
from autograder.objects import resolve
from autograder.reference import reference


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rng(seed: int) -> random.Random:
    return random.Random(seed)


def run_reference(name: str, inputs: dict):
    """The reference's answer on `inputs` (markers resolved), computed in this trusted process."""
    with one_thread():
        return reference(name)(**resolve(inputs))


def ragged_mask(batch: int, positions: int, g: torch.Generator, empty_row: bool = False) -> torch.Tensor:
    """A 0/1 (B, T) mask: each row a run of response tokens after a prompt, lengths differing."""
    mask = torch.zeros(batch, positions, dtype=torch.long)
    for row in range(batch):
        start = int(torch.randint(0, positions // 2, (1,), generator=g))
        length = int(torch.randint(1, positions - start + 1, (1,), generator=g))
        mask[row, start:start + length] = 1
    if empty_row:
        mask[-1] = 0
    return mask
