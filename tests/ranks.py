"""Real gloo ranks for the data-parallel tests: spawn them, wait with a bound, fail plainly."""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable
from typing import NoReturn

import pytest
import torch
import torch.distributed as dist
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


def gloo_rank(rank: int, port: int, world_size: int, body: Callable[[], None]) -> NoReturn:
    """One spawned rank: join the gloo group of `world_size` on `port`, run `body()` on one thread,
    wait for every rank, and leave with os._exit (1, the traceback printed, if `body` raised).
    gloo's destroy_process_group hung at teardown about once in ten runs after every result was
    saved; the results are on disk and the parent checks them, so a rank leaves at once instead."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        body()
        dist.barrier()
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def ddp_update(model: torch.nn.Module, tokenizer, *args, **kwargs) -> list[torch.Tensor]:
    """The change of `model`'s parameters made by `grpo_train_step(ddp_model, tokenizer, optimizer,
    *args, **kwargs)`, the model wrapped in DistributedDataParallel and the optimizer SGD at lr 1:
    one step, minus the gradient."""
    from course import grpo_train_step

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    before = [p.detach().clone() for p in model.parameters()]
    grpo_train_step(ddp, tokenizer, torch.optim.SGD(ddp.parameters(), lr=1.0), *args, **kwargs)
    return [p.detach() - b for p, b in zip(model.parameters(), before)]


def rank_share(batch: dict, rows, tokenizer, aligned: dict) -> tuple[dict, dict]:
    """This rank's rows of a rollout `batch` (its prompts, responses and ground truths), and the
    tensors of `aligned` cut to those rows and to the width of their own tokenization (B', T');
    other values of `aligned` as they are."""
    from naive import tokenize

    mine = {key: [batch[key][i] for i in rows] for key in ("prompts", "responses", "ground_truths")}
    width = tokenize(mine["prompts"], mine["responses"], tokenizer)["input_ids"].shape[1]
    return mine, {k: v[rows, :width] if isinstance(v, torch.Tensor) else v for k, v in aligned.items()}
