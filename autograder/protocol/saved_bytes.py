"""What autograd saves for backward, counted the same way on both sides of the sandbox.

The memory check of the scoring stage asks the submission's child for the bytes its function
leaves saved for backward and measures the reference's own in the trusted process: the one
definition lives here, in the vocabulary the two sides share, so neither imports the other.
"""

from __future__ import annotations

import types
import weakref

import torch
import torch.utils.checkpoint

MAX_DEPTH = 6  # how deep `_owned_tensors` looks into nested inputs
_AUTOGRAD = torch._C._autograd  # where saved_tensors_hooks pushes its hooks, at each __enter__
CHECKPOINT_FILE = torch.utils.checkpoint.__file__  # non-reentrant checkpointing's own hooks
# autograd's own entry points, bound at import: in the stage child, before the submission loads
_PUSH, _POP = _AUTOGRAD._push_saved_tensors_default_hooks, \
    _AUTOGRAD._pop_saved_tensors_default_hooks
_STORAGE, _ADDRESS, _NBYTES = torch._C.TensorBase.untyped_storage, torch._C.StorageBase.data_ptr, \
    torch._C.StorageBase.nbytes
_WEAK, _NAMESPACE = weakref.ref, types.SimpleNamespace
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction  # a mode on torch's stack sees no read


def saved_bytes_counter(inputs, watch_hooks: bool = False) -> types.SimpleNamespace:
    """Bytes of the distinct storages autograd saves for backward between `enter()` and `leave()`
    and still holds at `total()`, not counting storages the caller already owns (tensors among
    `inputs`, a model's parameters and buffers). Counted with autograd's saved-tensor default
    hooks (what `torch.autograd.graph.saved_tensors_hooks` pushes), so it works on any device;
    what `torch.utils.checkpoint` recomputes is never handed to them. `watch_hooks`: name the
    saved-tensor hooks the code under test pushes (`foreign`); for a submission only (the trusted
    side, which may measure in several threads, does not). Closures over autograd's C functions
    bound at import, and no class: nothing the submission can rebind changes the count."""
    with _NO_TORCH_FUNCTION():
        owned = {_ADDRESS(_STORAGE(t)) for t in _owned_tensors(inputs)}
    saved, foreign = [], []  # (weak reference to the saved tensor, storage address, bytes)
    # the hook autograd holds is a generator's `send`: code under test can read the hooks on
    # top of autograd's stack, and a closure's cells (or an object's attributes) would hand it
    # the list the count is read from; a generator's frame is refused to it (provenance's hook)
    packing = _packing(owned, saved)
    next(packing)
    pack = packing.send

    def watched_push(pack, unpack) -> None:
        """Hooks pushed inside ours take precedence, so what they keep never reaches `pack`:
        only checkpointing's (which keep nothing, and recompute) are the student's to use; any
        other is named in the answer (its code cannot claim checkpoint's file without building
        code at run time, which the copy rule forbids)."""
        code = getattr(pack, "__code__", None)
        if getattr(code, "co_filename", None) != CHECKPOINT_FILE:
            foreign.append(str(getattr(pack, "__qualname__", type(pack).__name__))[:100])
        return _PUSH(pack, unpack)

    def enter() -> None:
        _PUSH(pack, _unpacked)
        if watch_hooks:
            _AUTOGRAD._push_saved_tensors_default_hooks = watched_push

    def leave() -> None:
        if watch_hooks:
            _AUTOGRAD._push_saved_tensors_default_hooks = _PUSH
        _POP()

    def total() -> int:
        alive = {address: size for ref, address, size in saved if ref() is not None}
        return sum(alive.values())

    return _NAMESPACE(enter=enter, leave=leave, total=total, foreign=foreign)


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

    def __init__(self, inputs, watch_hooks: bool = False):
        self.counter = saved_bytes_counter(inputs, watch_hooks)
        self.foreign = self.counter.foreign

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
