"""Real gloo ranks for the data-parallel tests: spawn them, wait with a bound, fail plainly."""

from __future__ import annotations

import socket

import pytest
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(worker, directory: str, world_size: int, seconds: int) -> None:
    """`worker(rank, port, directory)` on `world_size` spawned processes; a rank that never joins
    a collective would hang the others, so the test fails after `seconds` instead."""
    context = mp.start_processes(worker, args=(free_port(), directory), nprocs=world_size,
                                 join=False, start_method="spawn")
    for _ in range(seconds // 10):
        if context.join(timeout=10):
            return
    for process in context.processes:
        process.kill()
    pytest.fail(f"distributed workers did not finish within {seconds} s (a rank left a "
                "collective?)")
