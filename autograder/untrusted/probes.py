"""Probes: the grader's code that calls a submission's function and turns what it returns into data.

This module runs where the student's code runs (a stage child of the sandboxed worker, or the
notebook's own kernel for a self-check), so nothing it returns is trusted: every result is plain data (dicts, lists,
numbers, strings, plain `torch.Tensor`s) that the parent decodes safely and judges itself.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from autograder.protocol import wire
from autograder.protocol.answers import error_answer, exception_answer
from autograder.protocol.markers import REWARD_FN, TOKENIZER, resolve
from autograder.protocol.saved_bytes import SavedBytes
from autograder.untrusted import ranks

MAX_DEPTH = 6


@dataclass
class SubmissionState:
    """The functions under test, and a counter of calls into the reference of the same name."""

    functions: dict
    statuses: dict
    device: str = "cpu"
    reference_calls: Counter = field(default_factory=Counter)
    patch: object = None  # context manager factory that installs call counters (in-process mode)
    recheck: object = None  # recheck(name): why `name` is no longer the code judged at load
    given_head_calls: list | None = None  # [calls into the given head], counted by the hook
    ranks: list | None = None  # data-parallel ranks forked before the submission loaded (tier 2)


def to_plain(x, depth: int = 0):
    """Plain data only: a tensor subclass becomes a plain tensor, anything unknown a type name."""
    if depth > MAX_DEPTH:
        return {"__unsupported__": "nested too deep"}
    if isinstance(x, torch.Tensor):
        plain = torch.Tensor.as_subclass(x, torch.Tensor)
        return torch.Tensor.detach(plain).cpu().clone().contiguous()
    if isinstance(x, (bool, int, float, str)) or x is None:
        return type(x)(x) if x is not None else None
    if isinstance(x, dict):
        return {str(k): to_plain(v, depth + 1) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        items = [to_plain(v, depth + 1) for v in x]
        return tuple(items) if isinstance(x, tuple) else items
    if hasattr(x, "item") and hasattr(x, "dtype"):  # numpy scalars
        try:
            return float(x.item())
        except Exception:
            pass
    return {"__unsupported__": type(x).__name__}


# bound at import, before any submission loads: patching torch's modules later changes neither
_NO_SUBCLASS_FUNCTIONS = torch._C.DisableTorchFunctionSubclass
_REQUIRES_GRAD = torch._C.TensorBase.requires_grad


def _tensor_requires_grad(x: torch.Tensor) -> bool:
    """Autograd's own flag: a tensor subclass may override `requires_grad` (a property that says
    False) or intercept it in `__torch_function__`; the base class's descriptor, with torch
    functions of subclasses disabled, reads what autograd will do."""
    with _NO_SUBCLASS_FUNCTIONS():
        return bool(_REQUIRES_GRAD.__get__(x))


def _requires_grad(x, prefix: str = "") -> dict:
    if isinstance(x, torch.Tensor):
        return {prefix: _tensor_requires_grad(x)}
    flags = {}
    if isinstance(x, dict):
        for k, v in x.items():
            flags.update(_requires_grad(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            flags.update(_requires_grad(v, f"{prefix}.{i}" if prefix else str(i)))
    return flags


def get_path(output, path: str):
    for part in filter(None, path.split(".")):
        output = output[int(part)] if isinstance(output, (list, tuple)) else output[part]
    return output


def _given_head_calls(state: SubmissionState) -> int:
    """Calls into the given chunked head so far, as the stage child's hook counted them (0 where
    nothing counts: the notebook's own kernel)."""
    return state.given_head_calls[0] if state.given_head_calls else 0


def _call_guarded(state: SubmissionState, name: str, fn):
    """Run fn(), unless `name` is no longer the code the grader read and judged at load
    (`state.recheck`: its `__code__` swapped, what it reaches changed); report delegation if the
    reference `name` was called meanwhile."""
    why = state.recheck(name) if state.recheck else None
    if why:
        return {"status": "unread", "why": why}
    state.reference_calls.clear()
    try:
        with state.patch() if state.patch else contextlib.nullcontext():
            result = fn()
    except Exception as exc:
        result = exception_answer(exc)
    if state.reference_calls[name]:
        return {"status": "delegated"}
    return result


def probe_call(state: SubmissionState, request: dict) -> dict:
    name = request["function"]
    function = state.functions[name]
    kwargs = resolve(request["kwargs"], state.device)
    for arg in request.get("grad_wrt", ()):
        kwargs[arg] = kwargs[arg].detach().requires_grad_(True)

    measure = request.get("measure_cuda_memory") and torch.cuda.is_available()

    def run():
        head_calls = _given_head_calls(state)
        if measure:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            baseline = torch.cuda.memory_allocated()
        saved = SavedBytes(kwargs, watch_hooks=True) if request.get("count_saved_bytes") \
            else contextlib.nullcontext()
        with torch.no_grad() if request.get("no_grad") else contextlib.nullcontext(), saved:
            output = function(**kwargs)
        response = {"status": "ok", "output": to_plain(output),
                    "requires_grad": _requires_grad(output)}
        if request.get("count_given_head"):
            response["given_head_calls"] = _given_head_calls(state) - head_calls
        if request.get("count_saved_bytes"):
            response["saved_bytes"] = saved.total()
            response["foreign_saved_hooks"] = saved.foreign[:10]
        backward = request.get("backward")
        if backward is not None:
            target = get_path(output, backward["path"])
            if isinstance(target, torch.Tensor) and target.requires_grad:
                cotangent = backward["cotangent"].to(target.device, target.dtype)
                (target * cotangent).sum().backward()
            response["grads"] = {arg: to_plain(kwargs[arg].grad) for arg in request.get("grad_wrt", ())}
        if measure:
            torch.cuda.synchronize()
            response["peak_bytes"] = int(torch.cuda.max_memory_allocated() - baseline)
        return response

    return _call_guarded(state, name, run)


def _flat_parameters(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in model.parameters()])


def _one_train_step(state: SubmissionState, request: dict, run_kwargs: dict, wrap=None,
                    device: str | None = None) -> dict:
    name = request["function"]
    device = device or state.device
    model = resolve(request["model"], device)
    before = _flat_parameters(model)
    trained = wrap(model) if wrap else model
    optimizer = torch.optim.SGD(trained.parameters(), lr=request.get("lr", 1.0))
    kwargs = resolve(run_kwargs, device)
    kwargs.update(model=trained, optimizer=optimizer, tokenizer=resolve(TOKENIZER),
                  reward_fn=resolve(REWARD_FN))

    def run():
        output = state.functions[name](**kwargs)
        leftover = [p.grad for p in model.parameters() if p.grad is not None]
        return {"status": "ok", "output": to_plain(output),
                "delta": _flat_parameters(model) - before,
                "grads_left": bool(any(bool(g.abs().sum() > 0) for g in leftover))}

    response = _call_guarded(state, name, run)
    response.setdefault("delta", _flat_parameters(model) - before)
    return response


def probe_train_step(state: SubmissionState, request: dict) -> dict:
    return {"status": "ok", "runs": [_one_train_step(state, request, run) for run in request["runs"]]}


def ddp_train_step(state: SubmissionState, request: dict, run_kwargs: dict) -> dict:
    """One rank's train step, once its gloo process group is up: DDP over the model, on CPU (a
    forked child cannot use CUDA once the worker has initialized it)."""
    from torch.nn.parallel import DistributedDataParallel

    return _one_train_step(state, request, run_kwargs, wrap=DistributedDataParallel, device="cpu")


def probe_train_step_ddp(state: SubmissionState, request: dict) -> dict:
    """Run the train step on `world_size` gloo ranks; each rank returns its update. The ranks
    are the child's own (`autograder.untrusted.ranks`: tier 2, forked before the submission
    loaded) where it has them, else forked here (tier 1's network namespace, a self-check)."""
    if state.ranks is not None:
        return {"status": "ok", "runs": ranks.run_on_ranks(state.ranks, request, _rank_result)}
    runs = request["runs"]
    world_size = len(runs)
    # the ranks meet in a private temporary folder (not the notebook's folder, in a self-check)
    store_dir = tempfile.mkdtemp(prefix="grpo_ddp_store_")
    store_path = os.path.join(store_dir, "store")
    children = []
    for rank, run_kwargs in enumerate(runs):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: one data-parallel rank
            os.close(read_fd)
            payload = b""
            try:
                # the parent's OpenMP threads did not come along: a notebook kernel that used them
                # would hang this rank's first parallel op (the sandbox's worker runs one thread)
                torch.set_num_threads(1)
                import torch.distributed as dist

                store = dist.FileStore(store_path, world_size)
                dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
                result = ddp_train_step(state, request, run_kwargs)
                buffer = io.BytesIO()
                torch.save(result, buffer)
                payload = buffer.getvalue()
            finally:
                wire.write_frame(write_fd, payload)
                os._exit(0)
        os.close(write_fd)
        children.append((pid, read_fd))
    deadline = time.monotonic() + request.get("timeout", 60)
    results = []
    try:
        for _pid, read_fd in children:
            results.append(_rank_result(read_fd, deadline))
    finally:
        for pid, read_fd in children:
            os.close(read_fd)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        shutil.rmtree(store_dir, ignore_errors=True)
    return {"status": "ok", "runs": results}


def _rank_result(fd: int, deadline: float) -> dict:
    """One rank's answer: its train-step result, or an error saying how it ended."""
    try:
        data = wire.read_frame(fd, deadline)
    except wire.Timeout:
        return error_answer("Timeout", "a data-parallel rank did not finish")
    except (wire.Closed, wire.WireError):
        data = b""
    if not data:
        return error_answer("Crash", "a data-parallel rank crashed")
    return torch.load(io.BytesIO(data), weights_only=True)


PROBES = {"call": probe_call, "train_step": probe_train_step, "train_step_ddp": probe_train_step_ddp}


def handle(state: SubmissionState, request: dict) -> dict:
    name = request["function"]
    status = state.statuses.get(name, "missing")
    if status != "ok":
        return {"status": status}
    return PROBES[request["kind"]](state, request)
