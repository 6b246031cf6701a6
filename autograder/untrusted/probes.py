"""Probes: the grader's code that calls a submission's function and turns what it returns into data.

This module runs where the student's code runs (a stage child of the sandboxed worker, or the
notebook's own kernel for a self-check), so nothing it returns is trusted: every result is plain
data (dicts, lists, numbers, strings, plain `torch.Tensor`s) that the parent decodes safely and
judges itself.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import time
import types

import torch

from autograder.protocol import wire
from autograder.protocol.answers import error_answer, exception_answer
from autograder.protocol.markers import REWARD_FN, TOKENIZER, resolve
from autograder.protocol.saved_bytes import module_tensors, owned_storages, saved_bytes
from autograder.untrusted import ranks

MAX_DEPTH = 6


def submission_state(functions: dict, statuses: dict, device: str = "cpu",
                     reference_calls: dict | None = None, patch=None, recheck=None,
                     given_head_calls: list | None = None, ranks: list | None = None):
    """What the probes know of a submission: the functions under test, their statuses, and
    `reference_calls` ({name: calls into the reference of that name}). `patch`: a context
    manager factory that installs call counters (in-process mode); `recheck(name)`: why `name` is
    no longer the code judged at load; `given_head_calls`: [calls into the given head], counted by
    the hook; `ranks`: data-parallel ranks forked before the submission loaded (tier 2). A
    `SimpleNamespace`, not a class of the grader's: no attribute of its type can be set."""
    return _NAMESPACE(functions=functions, statuses=statuses, device=device,
                      reference_calls={} if reference_calls is None else reference_calls,
                      patch=patch, recheck=recheck, given_head_calls=given_head_calls,
                      ranks=ranks)


# bound at import, before any submission loads (the stage child runs `seal`ed copies, whose
# globals are these, as they were then): patching torch's modules later changes neither
_NAMESPACE = types.SimpleNamespace
_TENSOR = torch.Tensor
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction  # subclasses' and modes' alike
_REQUIRES_GRAD = torch._C.TensorBase.requires_grad
_AS_PLAIN = torch._C.TensorBase.as_subclass
_DETACH, _CPU, _CLONE, _CONTIGUOUS = (torch._C.TensorBase.detach, torch._C.TensorBase.cpu,
                                      torch._C.TensorBase.clone, torch._C.TensorBase.contiguous)
_ITEMS, _NO_COUNTER = dict.items, contextlib.nullcontext
# torch.cuda's C counters (torch/cuda/memory.py reads them; None in a CPU build): its Python
# functions are the submission's to rebind
_CUDA = {name: getattr(torch._C, name, None) for name in (
    "_cuda_synchronize", "_cuda_getDevice", "_cuda_resetPeakMemoryStats", "_cuda_memoryStats")}


def cuda_allocated(which: str) -> int:
    """Bytes allocated by torch on the current GPU: "current", or "peak" since the last reset
    (`torch.cuda.memory_allocated`, `max_memory_allocated`: "allocated_bytes.all.<which>" of
    `torch.cuda.memory_stats`), from the counters bound at import, after a synchronize."""
    _CUDA["_cuda_synchronize"]()
    return int(_CUDA["_cuda_memoryStats"](_CUDA["_cuda_getDevice"]())["allocated_bytes"]["all"][
        which])


def to_plain(x, flags: dict | None = None, prefix: str = "", depth: int = 0):
    """Plain data only: a tensor subclass becomes a plain tensor, anything unknown a type name.
    `flags`: filled with {path: whether the tensor there requires grad}, read in the same pass
    (a container that answers differently each time it is read cannot show the flags one value
    and the output another). Containers are read with the built-in types' own methods."""
    if depth > MAX_DEPTH:
        return {"__unsupported__": "nested too deep"}
    if isinstance(x, _TENSOR):
        if flags is not None:
            flags[prefix] = _tensor_requires_grad(x)
        with _NO_TORCH_FUNCTION():
            return _CONTIGUOUS(_CLONE(_CPU(_DETACH(_AS_PLAIN(x, _TENSOR)))))
    if isinstance(x, (bool, int, float, str)) or x is None:
        return type(x)(x) if x is not None else None
    if issubclass(type(x), dict):
        return {str(k): to_plain(v, flags, f"{prefix}.{k}" if prefix else str(k), depth + 1)
                for k, v in list(_ITEMS(x))}
    if issubclass(type(x), (list, tuple)):
        items = [to_plain(v, flags, f"{prefix}.{i}" if prefix else str(i), depth + 1)
                 for i, v in enumerate(list(x))]
        return tuple(items) if issubclass(type(x), tuple) else items
    if hasattr(x, "item") and hasattr(x, "dtype"):  # numpy scalars
        try:
            return float(x.item())
        except Exception:
            pass
    return {"__unsupported__": type(x).__name__}


def _tensor_requires_grad(x: torch.Tensor) -> bool:
    """Autograd's own flag: a tensor subclass may override `requires_grad` (a property that says
    False) or intercept it in `__torch_function__`, and a torch function mode left on torch's
    stack sees the read too; the base class's descriptor, with torch functions disabled (the
    subclasses' and the modes'), reads what autograd will do."""
    with _NO_TORCH_FUNCTION():
        return bool(_REQUIRES_GRAD.__get__(x))


def get_path(output, path: str):
    for part in filter(None, path.split(".")):
        output = output[int(part)] if isinstance(output, (list, tuple)) else output[part]
    return output


def _given_head_calls(state: types.SimpleNamespace) -> int:
    """Calls into the given chunked head so far, as the stage child's hook counted them (0 where
    nothing counts: the notebook's own kernel)."""
    return state.given_head_calls[0] if state.given_head_calls else 0


def _call_guarded(state: types.SimpleNamespace, name: str, fn):
    """Run fn(), unless `name` is no longer the code the grader read and judged at load
    (`state.recheck`: its `__code__` swapped, what it reaches changed); report delegation if the
    reference `name` was called meanwhile."""
    why = state.recheck(name) if state.recheck else None
    if why:
        return {"status": "unread", "why": why}
    state.reference_calls.clear()
    try:
        with state.patch() if state.patch else _NO_COUNTER():
            result = fn()
    except Exception as exc:
        result = exception_answer(exc)
    if state.reference_calls.get(name):
        return {"status": "delegated"}
    return result


def probe_call(state: types.SimpleNamespace, request: dict) -> dict:
    name = request["function"]
    function = state.functions[name]
    kwargs = resolve(request["kwargs"], state.device)
    for arg in request.get("grad_wrt", ()):
        kwargs[arg] = kwargs[arg].detach().requires_grad_(True)

    measure = request.get("measure_cuda_memory") and _CUDA["_cuda_memoryStats"] is not None

    def run():
        head_calls = _given_head_calls(state)
        if measure:
            baseline = cuda_allocated("current")
            _CUDA["_cuda_resetPeakMemoryStats"](_CUDA["_cuda_getDevice"]())
        owned = owned_storages(kwargs) if request.get("count_saved_bytes") else None
        with torch.no_grad() if request.get("no_grad") else _NO_COUNTER():
            output = function(**kwargs)
        flags = {}
        response = {"status": "ok", "output": to_plain(output, flags), "requires_grad": flags}
        if request.get("count_given_head"):
            response["given_head_calls"] = _given_head_calls(state) - head_calls
        if owned is not None:  # read from the graph behind the output, after the call
            response["saved_bytes"], response["saved_hidden"] = saved_bytes(output, owned)
        if request.get("backward") is not None:
            response["grads"] = _backward(output, request, kwargs)
        if measure:
            response["peak_bytes"] = cuda_allocated("peak") - baseline
        return response

    return _call_guarded(state, name, run)


_GRAD = torch._C.TensorBase.grad
# autograd's engine, as torch.autograd.backward calls it (torch/autograd/graph.py)
_RUN_BACKWARD = torch.autograd.variable.Variable._execution_engine.run_backward


def _backward(output, request: dict, kwargs: dict) -> dict:
    """{argument: its gradient} after backward from `request["backward"]["path"]` of `output`
    with the given cotangent (the vector-Jacobian product of `(target * cotangent).sum()`).
    Autograd's engine and the `requires_grad` and `grad` descriptors are bound at import and read
    with torch functions off: a rebound `Tensor.grad` or `Tensor.backward`, or a subclass, hands
    the probe no gradient autograd did not compute."""
    backward = request["backward"]
    with _NO_TORCH_FUNCTION():
        target = get_path(output, backward["path"])
        if issubclass(type(target), _TENSOR) and _REQUIRES_GRAD.__get__(target):
            cotangent = _TO(backward["cotangent"], target)  # target's device and dtype
            _RUN_BACKWARD((target,), (cotangent,), False, False, (), allow_unreachable=True,
                          accumulate_grad=True)
        grads = {arg: _GRAD.__get__(kwargs[arg]) for arg in request.get("grad_wrt", ())}
    return {arg: to_plain(grad) for arg, grad in grads.items()}


_CAT, _RESHAPE, _TO, _SUB = torch.cat, torch._C.TensorBase.reshape, torch._C.TensorBase.to, \
    torch._C.TensorBase.sub
_COUNT_NONZERO, _ITEM = torch._C.TensorBase.count_nonzero, torch._C.TensorBase.item

# torch's dispatch switch is a pybind11 class, whose attributes can be set: its parts bound now
_NO_DISPATCH = torch._C._DisableTorchDispatch
_NO_DISPATCH_PARTS = (_NO_DISPATCH.__new__, _NO_DISPATCH.__init__, _NO_DISPATCH.__enter__,
                      _NO_DISPATCH.__exit__)


def _without_modes(read, *args):
    """read(*args) with torch's function and dispatch modes (and subclasses) disabled: a mode the
    submission left on torch's stacks sees every op that runs, the grader's after its call too."""
    new, init, enter, leave = _NO_DISPATCH_PARTS
    guard = new(_NO_DISPATCH)
    init(guard)
    enter(guard)
    try:
        with _NO_TORCH_FUNCTION():
            return read(*args)
    finally:
        leave(guard, None, None, None)


def _flat_parameters(parameters: list) -> torch.Tensor:
    return _without_modes(lambda: _CAT([_TO(_RESHAPE(_DETACH(p), -1), "cpu", torch.float64)
                                        for p in parameters]))


def _grads_left(parameters: list) -> bool:
    """Whether a parameter still holds a non-zero gradient (autograd's own `grad` descriptor)."""
    return _without_modes(lambda: any(_ITEM(_COUNT_NONZERO(g)) > 0 for g in
                                      [_GRAD.__get__(p) for p in parameters] if g is not None))


def _one_train_step(state: types.SimpleNamespace, request: dict, run_kwargs: dict, wrap=None,
                    device: str | None = None) -> dict:
    """The submission's train step on a fresh model; what it changed (`delta`, the parameters
    after minus before) and whether it left gradients behind (`grads_left`), read from the
    parameters as the model held them before the call."""
    name = request["function"]
    device = device or state.device
    model = resolve(request["model"], device)
    parameters = module_tensors(model)  # read before the call, from the modules' dicts
    before = _flat_parameters(parameters)
    trained = wrap(model) if wrap else model
    optimizer = torch.optim.SGD(trained.parameters(), lr=request.get("lr", 1.0))
    kwargs = resolve(run_kwargs, device)
    kwargs.update(model=trained, optimizer=optimizer, tokenizer=resolve(TOKENIZER),
                  reward_fn=resolve(REWARD_FN))

    def run():
        output = state.functions[name](**kwargs)
        return {"status": "ok", "output": to_plain(output),
                "delta": _SUB(_flat_parameters(parameters), before),
                "grads_left": _grads_left(parameters)}

    response = _call_guarded(state, name, run)
    response.setdefault("delta", _SUB(_flat_parameters(parameters), before))
    return response


def probe_train_step(state: types.SimpleNamespace, request: dict) -> dict:
    return {"status": "ok", "runs": [_one_train_step(state, request, run)
                                     for run in request["runs"]]}


def ddp_train_step(state: types.SimpleNamespace, request: dict, run_kwargs: dict) -> dict:
    """One rank's train step, once its gloo process group is up: DDP over the model, on CPU (a
    forked child cannot use CUDA once the worker has initialized it)."""
    from torch.nn.parallel import DistributedDataParallel

    return _one_train_step(state, request, run_kwargs, wrap=DistributedDataParallel, device="cpu")


def probe_train_step_ddp(state: types.SimpleNamespace, request: dict) -> dict:
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


PROBES = {"call": probe_call, "train_step": probe_train_step,
          "train_step_ddp": probe_train_step_ddp}


def handle(state: types.SimpleNamespace, request: dict) -> dict:
    name = request["function"]
    status = state.statuses.get(name, "missing")
    if status != "ok":
        return {"status": status}
    return PROBES[request["kind"]](state, request)
