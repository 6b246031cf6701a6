"""Data-parallel ranks forked before any student code runs: gloo connects, then the door shuts.

In tier 2 (`autograder.untrusted.confine`, no network namespace) a stage child whose stage has a
data-parallel check is a rank spawner: it alone may use TCP, as its fork order says. Before it
loads the submission it forks `world_size` ranks. Each rank calls `init_process_group` over a
FileStore in the child's private folder (gloo's TCP transport on 127.0.0.1, GLOO_SOCKET_IFNAME=lo:
the ProcessGroupGloo constructor connects its full mesh of pairs, torch/csrc/distributed/c10d/
ProcessGroupGloo.cpp), then calls `confine.close_network` (no TCP, no socket() at all), and only
then loads the submission. The spawner closes its network before it loads the submission too.
So student code never opens a TCP connection: it may only use the pairs gloo connected between
the ranks of its own child. Measured: DDP's broadcast of the module, its gradient all_reduce, and
the all_reduce of token counts open no socket after init (tests/test_redteam.py grades them).

Each rank then serves the spawner's data-parallel requests (`run_on_ranks`) over pipes: the
request and its shard of keyword arguments in, its train-step result (`torch.save`, read back with
weights_only) out, until the spawner ends. A rank that crashes, hangs or breaks the process group
fails only that submission's data-parallel check; the template's reap kills every rank with its
child's user id.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import pickle
import signal
import sys
import time
import traceback

import torch

from autograder.protocol import wire

PR_SET_PDEATHSIG = 1


class Rank:
    """The spawner's end of one rank: its pid and its request and answer pipes."""

    def __init__(self, pid: int, request_fd: int, answer_fd: int):
        self.pid, self.request_fd, self.answer_fd = pid, request_fd, answer_fd


def spawn(world_size: int, folder: str, serve_rank) -> list[Rank]:
    """Fork `world_size` ranks that meet in `folder`; each runs `serve_rank(rank, request_fd,
    answer_fd)` once its network is closed (it loads the submission and answers requests)."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only: gloo looks no interface up by name
    store_path = os.path.join(folder, "gloo_store")
    ranks = []
    for rank in range(world_size):
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                for fd in (request_write, answer_read):
                    os.close(fd)
                for earlier in ranks:
                    os.close(earlier.request_fd)
                    os.close(earlier.answer_fd)
                ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                _connect(rank, world_size, store_path)
                serve_rank(rank, request_read, answer_write)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(request_read)
        os.close(answer_write)
        ranks.append(Rank(pid, request_write, answer_read))
    return ranks


def _connect(rank: int, world_size: int, store_path: str) -> None:
    import torch.distributed as dist

    from autograder.untrusted import confine

    torch.set_num_threads(1)  # the template's OpenMP threads did not come along with the fork
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    confine.close_network()


def serve_requests(request_fd: int, answer_fd: int, run) -> None:
    """A rank's loop: each request (pickled by its spawner, the same user) is answered with
    `run(request, shard)` saved by torch, or an empty frame where it raised."""
    while True:
        try:
            request, shard = pickle.loads(wire.read_frame(request_fd, None, cap=2**40))
        except wire.Closed:
            return
        payload = b""
        try:
            buffer = io.BytesIO()
            torch.save(run(request, shard), buffer)
            payload = buffer.getvalue()
        finally:
            wire.write_frame(answer_fd, payload)


def run_on_ranks(ranks: list[Rank], request: dict, read_result) -> list[dict]:
    """Send each rank its shard of `request["runs"]`; `read_result(fd, deadline)` reads each
    answer (an error answer of type Timeout or Crash where none came). After such a failure the
    ranks are ended (their pipes may hold a late answer) and later requests are refused."""
    if not ranks:
        raise RuntimeError("this child's data-parallel ranks ended earlier (a crash or a timeout)")
    if len(ranks) != len(request["runs"]):
        raise ValueError(f"this child has {len(ranks)} data-parallel ranks, the request needs "
                         f"{len(request['runs'])}")
    for rank, shard in zip(ranks, request["runs"]):
        wire.write_frame(rank.request_fd, pickle.dumps((request, shard)))
    deadline = time.monotonic() + request.get("timeout", 60)
    results = [read_result(rank.answer_fd, deadline) for rank in ranks]
    if any(result.get("error_type") in ("Timeout", "Crash") for result in results):
        end(ranks)
    return results


def end(ranks: list[Rank]) -> None:
    """Kill the ranks, close their pipes and forget them."""
    for rank in ranks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank.pid, signal.SIGKILL)
        os.close(rank.request_fd)
        os.close(rank.answer_fd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(rank.pid, 0)
    ranks.clear()
