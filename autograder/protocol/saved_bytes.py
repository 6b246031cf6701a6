"""What autograd saves for backward, counted the same way on both sides of the sandbox.

The memory check of the scoring stage asks the submission's child for the bytes its function
leaves saved for backward and measures the reference's own in the trusted process: the one
definition lives here, in the vocabulary the two sides share, so neither imports the other.
"""

from __future__ import annotations

import sys
import types
import weakref
from collections.abc import Callable

import torch
import torch.utils.checkpoint

MAX_DEPTH = 6  # how deep `_owned_tensors` looks into nested inputs
_AUTOGRAD = torch._C._autograd  # autograd's stack of saved-tensor hooks: saved_tensors_hooks' push
CHECKPOINT_FILE = torch.utils.checkpoint.__file__  # non-reentrant checkpointing's own hooks
# what changes what autograd hands the top hooks (torch/autograd/graph.py calls them by name):
# watched in the stage child, for good (`watch_saved_tensors_hooks`)
WATCHED = ("_push_saved_tensors_default_hooks", "_saved_tensors_hooks_disable",
           "_saved_tensors_hooks_set_tracing")
_STORAGE, _ADDRESS, _NBYTES = torch._C.TensorBase.untyped_storage, torch._C.StorageBase.data_ptr, \
    torch._C.StorageBase.nbytes
_WEAK, _NAMESPACE, _FUNCTION = weakref.ref, types.SimpleNamespace, types.FunctionType
_CODE, _QUALNAME = vars(types.FunctionType)["__code__"], vars(types.FunctionType)["__qualname__"]
_TYPE_NAME, _MODULE_DICT = vars(type)["__qualname__"], vars(types.ModuleType)["__dict__"]
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction  # a mode on torch's stack sees no read


def saved_bytes_counter(inputs, watch: Callable | None = None) -> types.SimpleNamespace:
    """Bytes of the distinct storages autograd saves for backward between `enter()` and `leave()`
    and still holds at `total()`, not counting storages the caller already owns (tensors among
    `inputs`, a model's parameters and buffers). Counted with autograd's saved-tensor default
    hooks (what `torch.autograd.graph.saved_tensors_hooks` pushes), so it works on any device;
    what `torch.utils.checkpoint` recomputes is never handed to them. `watch`: the stage child's
    handle on autograd's hooks (`watch_saved_tensors_hooks`), which pushes and pops the count's
    hooks and names in `foreign` what the code under test does to them meanwhile; None on the
    trusted side (which may measure in several threads). No class: nothing the submission can
    rebind changes the count."""
    with _NO_TORCH_FUNCTION():
        owned = {_ADDRESS(_STORAGE(t)) for t in _owned_tensors(inputs)}
    saved, foreign = [], []  # (weak reference to the saved tensor, storage address, bytes)
    # the hook autograd holds is a generator's `send`: code under test can read the hooks on
    # top of autograd's stack, and a closure's cells (or an object's attributes) would hand it
    # the list the count is read from; a generator's frame is refused to it (provenance's hook)
    packing = _packing(owned, saved)
    next(packing)
    pack = packing.send

    def enter() -> None:
        if watch is None:
            _AUTOGRAD._push_saved_tensors_default_hooks(pack, _unpacked)
        else:
            _raise_from(watch((pack, foreign)))

    def leave() -> None:
        if watch is None:
            _AUTOGRAD._pop_saved_tensors_default_hooks()
        else:
            _raise_from(watch((None, None)))

    def total() -> int:
        alive = {address: size for ref, address, size in saved if ref() is not None}
        return sum(alive.values())

    return _NAMESPACE(enter=enter, leave=leave, total=total, foreign=foreign)


def watch_saved_tensors_hooks() -> Callable:
    """Watch, for good, what changes autograd's saved-tensor hooks (`WATCHED`): each module that
    binds one of them (`torch._C._autograd`, `torch.autograd`) is given a function that calls
    autograd's own through a generator (`_watching`), which, while a call is measured, names in
    the count's `foreign` list each hook pushed that is not checkpointing's (hooks pushed inside
    the count's take precedence: what they keep never reaches its pack hook) and each switch
    that stops autograd handing saved tensors to the hooks. Call the sealed copy
    (`autograder.untrusted.seal`), before the submission loads: a name it binds then is the
    watched function, autograd's own are held in generators' frames only, which are refused to
    it (a closure's cell or `__globals__` would hand them over), and what the generators look up
    is in the sealed dict. Returns the grader's handle (`_measuring`'s `send`), for
    `saved_bytes_counter`."""
    own = {name: getattr(_AUTOGRAD, name) for name in WATCHED}
    stack = {name: getattr(_AUTOGRAD, name) for name in (
        WATCHED[0], WATCHED[2], "_pop_saved_tensors_default_hooks",
        "_top_saved_tensors_default_hooks")}
    watching = [None]  # the measured call's `foreign` list, shared by the two generators only
    watched, measuring = _watching(own, watching), _measuring(stack, watching)
    next(watched)
    next(measuring)
    replaced = {id(own[name]): (own[name], _watched(name, watched.send)) for name in WATCHED}
    for module in list(sys.modules.values()):
        names = _MODULE_DICT.__get__(module) if issubclass(type(module), types.ModuleType) else {}
        for key, value in list(names.items()):
            original, function = replaced.get(id(value), (None, None))
            if original is value:
                names[key] = function
    return measuring.send


def _watched(name: str, send: Callable | None) -> types.FunctionType:
    """The function bound in autograd's modules for `name`: it asks `send` (a generator's, whose
    frame holds autograd's own) to call it. Its globals are an empty dict of its own: the
    sealed dict it would otherwise hold is what the generators read."""

    def watched(*args):
        ok, answer = send((name, args))
        if not ok:
            raise answer
        return answer

    function = _FUNCTION(watched.__code__, {"__builtins__": {}}, name, None, watched.__closure__)
    function.__qualname__ = name
    return function


# the code of every watched function: the grader's, which a submission's name may reach (provenance
# judges it as read, and follows its closure)
WATCHED_CODE = _watched(WATCHED[0], None).__code__


def _watching(own: dict, watching: list):
    """A generator, the code under test's side: sent (name, args), it names the call in the
    measured call's `foreign` list (`watching[0]`, while one is measured) unless it pushes
    checkpointing's hooks (which keep nothing, and recompute: code cannot claim checkpoint's
    file without building code at run time, which the copy rule forbids), calls autograd's own,
    and yields (True, what it returned) or (False, what it raised)."""
    request = yield
    while True:
        try:
            name, args = request
            foreign = watching[0]
            if foreign is not None and not _checkpointing(name, args):
                foreign.append(_named(name, args))
            answer = (True, own[name](*args))
        except Exception as exc:
            answer = (False, exc)
        request = yield answer


def _measuring(stack: dict, watching: list):
    """A generator, the grader's side: sent (pack, foreign), it pushes the count's hooks and
    watches for `foreign`; sent (None, None), it stops and pops them, naming in `foreign` a stack
    whose top is no longer theirs (the code under test popped them, or left hooks of its own).
    Yields None, or what it raised."""
    request, pack = (yield), None
    while True:
        answer = None
        try:
            new, foreign = request
            if new is not None:
                if stack[WATCHED[2]](False):  # left set: autograd hands the hooks nothing
                    foreign.append(WATCHED[2])
                stack[WATCHED[0]](new, _unpacked)
                pack, watching[0] = new, foreign
            else:
                foreign, watching[0] = watching[0], None
                top = stack["_top_saved_tensors_default_hooks"](True)
                if top is None or top[0] is not pack:
                    foreign.append("a change of autograd's stack of saved-tensor hooks")
                else:
                    stack["_pop_saved_tensors_default_hooks"]()
        except Exception as exc:
            answer = exc
        request = yield answer


def _checkpointing(name: str, args: tuple) -> bool:
    """Whether (name, args) pushes hooks whose pack is a function of checkpoint's file."""
    return name == WATCHED[0] and type(args[0]) is _FUNCTION \
        and _CODE.__get__(args[0]).co_filename == CHECKPOINT_FILE


def _named(name: str, args: tuple) -> str:
    """What the answer calls a watched call: a pushed pack's name, or the function's."""
    if name != WATCHED[0]:
        return name
    pack = args[0]
    named = _QUALNAME.__get__(pack) if type(pack) is _FUNCTION else _TYPE_NAME.__get__(type(pack))
    return str(named)[:100]


def _raise_from(answer) -> None:
    if answer is not None:
        raise answer


def _packing(owned: set, saved: list):
    """A generator: sent a tensor autograd saves, it notes the tensor's storage (unless among
    `owned`) in `saved` and yields the tensor back (the pack hook's answer)."""
    t = yield
    while True:
        with _NO_TORCH_FUNCTION():
            storage = _STORAGE(t)
            if _ADDRESS(storage) not in owned:
                saved.append((_WEAK(t), _ADDRESS(storage), _NBYTES(storage)))
        t = yield t


def _unpacked(t: torch.Tensor) -> torch.Tensor:
    return t


class SavedBytes:
    """`saved_bytes_counter` as a context manager, for the trusted side (which measures the
    reference's own activations)."""

    def __init__(self, inputs):
        self.counter = saved_bytes_counter(inputs)

    def __enter__(self):
        self.counter.enter()
        return self

    def __exit__(self, *exc) -> None:
        self.counter.leave()

    def total(self) -> int:
        return self.counter.total()


def _owned_tensors(value, depth: int = 0):
    if depth > MAX_DEPTH:
        return
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, torch.nn.Module):
        yield from value.parameters()
        yield from value.buffers()
    elif isinstance(value, dict):
        for v in value.values():
            yield from _owned_tensors(v, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _owned_tensors(v, depth + 1)
