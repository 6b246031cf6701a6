"""What autograd saves for backward, counted the same way on both sides of the sandbox.

The memory check of the scoring stage asks the submission's child for the bytes its function
leaves saved for backward and measures the reference's own in the trusted process: the one
definition lives here, in the vocabulary the two sides share, so neither imports the other.
"""

from __future__ import annotations

import weakref

import torch
import torch.utils.checkpoint

MAX_DEPTH = 6  # how deep `_owned_tensors` looks into nested inputs
_AUTOGRAD = torch._C._autograd  # where saved_tensors_hooks pushes its hooks, at each __enter__
CHECKPOINT_FILE = torch.utils.checkpoint.__file__  # non-reentrant checkpointing's own hooks


class SavedBytes:
    """Bytes of the distinct storages autograd saves for backward while this context is active and
    still holds at the end, not counting storages the caller already owns (tensors among `inputs`, a
    model's parameters and buffers). Counted with `torch.autograd.graph.saved_tensors_hooks`, so it
    works on any device; what `torch.utils.checkpoint` recomputes is never handed to these hooks."""

    def __init__(self, inputs, watch_hooks: bool = False):
        """`watch_hooks`: name the saved-tensor hooks the code under test pushes (`foreign`); for a
        submission only (the trusted side, which may measure in several threads, does not)."""
        self.watch_hooks = watch_hooks
        self.foreign: list[str] = []
        self.owned = {t.untyped_storage().data_ptr() for t in _owned_tensors(inputs)}
        self.saved = []  # (weak reference to the saved tensor, storage address, storage bytes)
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in self.owned:
            self.saved.append((weakref.ref(t), storage.data_ptr(), storage.nbytes()))
        return t

    def __enter__(self):
        self.hooks.__enter__()
        if self.watch_hooks:
            self._push = _AUTOGRAD._push_saved_tensors_default_hooks
            _AUTOGRAD._push_saved_tensors_default_hooks = self._watched_push
        return self

    def _watched_push(self, pack, unpack):
        """Hooks pushed inside ours take precedence, so what they keep never reaches `_pack`:
        only checkpointing's (which keep nothing, and recompute) are the student's to use; any
        other is named in the answer (its code cannot claim checkpoint's file without building
        code at run time, which the copy rule forbids)."""
        code = getattr(pack, "__code__", None)
        if getattr(code, "co_filename", None) != CHECKPOINT_FILE:
            self.foreign.append(str(getattr(pack, "__qualname__", type(pack).__name__))[:100])
        return self._push(pack, unpack)

    def __exit__(self, *exc):
        if self.watch_hooks:
            _AUTOGRAD._push_saved_tensors_default_hooks = self._push
        return self.hooks.__exit__(*exc)

    def total(self) -> int:
        alive = {address: size for ref, address, size in self.saved if ref() is not None}
        return sum(alive.values())


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
