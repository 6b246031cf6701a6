"""What autograd keeps for backward, counted the same way on both sides of the sandbox.

The memory check of the scoring stage asks the submission's child for the bytes its function
leaves saved for backward and measures the reference's own in the trusted process: the one
definition lives here, in the vocabulary the two sides share, so neither imports the other.

It is read after the call, from the autograd graph behind what the call returned: every node
reachable through `next_functions` (torch/csrc/autograd/python_cpp_function.cpp), the tensors each
node holds for backward (`_raw_saved_*` of a built-in node, `_raw_saved_tensors` of a custom
`autograd.Function`'s, torch/csrc/autograd/python_function.cpp), and the tensors a custom
function's context keeps as attributes (`ctx.logits = z` keeps them as surely as
`save_for_backward`). A saved tensor packed by saved-tensor hooks (torch/autograd/graph.py) shows
its unpack hook (`SavedTensor.unpack_hook`): checkpointing's keeps nothing and recomputes
(torch/utils/checkpoint.py); any other hook's packed value is what the code under test chose to
show, so it is named (`hidden`) instead of counted. Nothing is pushed on autograd's thread-local
stack of hooks while the code under test runs, so there is nothing for it to push above, pop,
read or switch off, and a forward run in another thread is counted like any other.
"""

from __future__ import annotations

import types

import torch
import torch.utils.checkpoint
from torch.autograd.function import BackwardCFunction

MAX_DEPTH = 6  # how deep outputs, inputs and a context's attributes are looked into
MAX_NODES = 200_000  # a graph larger than this is named, not walked to its end
CHECKPOINT_FILE = torch.utils.checkpoint.__file__  # non-reentrant checkpointing's own hooks
# autograd's and torch's C entry points and descriptors, bound at import: in the stage child,
# before the submission loads (a class attribute it sets later changes none of them)
_TENSOR, _PYTHON_NODE, _MODULE = torch._C.TensorBase, torch._C._FunctionBase, torch.nn.Module
_GRAD_FN = vars(_TENSOR)["grad_fn"].__get__
_PYTHON_NEXT = vars(_PYTHON_NODE)["next_functions"].__get__
_PYTHON_SAVED = vars(_PYTHON_NODE)["_raw_saved_tensors"].__get__
_CONTEXT_DICT = vars(BackwardCFunction)["__dict__"].__get__
_SAVED_TENSOR = torch._C._autograd.SavedTensor
_PACKED, _UNPACK_HOOK = vars(_SAVED_TENSOR)["data"].fget, vars(_SAVED_TENSOR)["unpack_hook"].fget
_STORAGE, _ADDRESS, _NBYTES = _TENSOR.untyped_storage, torch._C.StorageBase.data_ptr, \
    torch._C.StorageBase.nbytes
_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: autograd's built-in node types
_FUNCTION, _CODE = types.FunctionType, vars(types.FunctionType)["__code__"].__get__
_QUALNAME = vars(types.FunctionType)["__qualname__"].__get__
_TYPE_NAME = vars(type)["__qualname__"].__get__
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction  # a mode on torch's stack sees no read
_GETATTR, _VALUES = object.__getattribute__, dict.values


def owned_storages(inputs) -> frozenset:
    """The storages the caller owns before the call: the tensors among `inputs`, a model's
    parameters and buffers. Take them before the code under test runs (after it, a buffer it
    registered on the model would be among them)."""
    with _NO_TORCH_FUNCTION():
        return frozenset(_ADDRESS(_STORAGE(t)) for t in _tensors(inputs, modules=True))


def saved_bytes(outputs, owned: frozenset) -> tuple[int, list[str]]:
    """(bytes, hidden): the bytes of the distinct storages that the autograd graph behind the
    tensors among `outputs` keeps for backward, less those in `owned` (`owned_storages`, taken
    before the call); `hidden` names what keeps tensors out of sight of the count (saved-tensor
    hooks other than checkpointing's, a graph too large to walk). Reads only C descriptors bound
    at import, with torch functions disabled, and runs no hook: call it after the code under test
    has returned."""
    kept, hidden, seen = {}, [], set()  # {storage address: bytes}, [what hides], {id(node)}
    with _NO_TORCH_FUNCTION():
        nodes = [_GRAD_FN(t) for t in _tensors(outputs)]
        while nodes:
            node = nodes.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            if len(seen) > MAX_NODES:
                hidden.append(f"an autograd graph of more than {MAX_NODES} nodes")
                break
            following, held = _node_parts(node, hidden)
            nodes += following
            for tensor in held:
                storage = _STORAGE(tensor)
                if _ADDRESS(storage) not in owned:
                    kept[_ADDRESS(storage)] = _NBYTES(storage)
    return sum(kept.values()), hidden


def _node_parts(node, hidden: list) -> tuple[list, list]:
    """(the nodes `node` leads to, the tensors it keeps for backward), naming in `hidden` (once
    each, ten at most) saved tensors packed by hooks other than checkpointing's."""
    kind = type(node)
    if issubclass(kind, _PYTHON_NODE):  # a custom autograd.Function's context
        edges, held = _PYTHON_NEXT(node), list(_tensors(_CONTEXT_DICT(node)))
        saved = [_PYTHON_SAVED]
    elif kind.__flags__ & _IMMUTABLE and "next_functions" in vars(kind):  # a built-in node
        edges, held = vars(kind)["next_functions"].__get__(node), []
        saved = [d.__get__ for name, d in vars(kind).items() if name.startswith("_raw_saved_")]
    else:
        _name(hidden, f"an autograd node of type {_TYPE_NAME(kind)[:80]}")
        return [], []
    for read in saved:
        try:
            value = read(node)
        except RuntimeError:  # freed by a backward the code under test ran: nothing kept
            continue
        for item in value if type(value) in (list, tuple) else (value,):
            if type(item) is not _SAVED_TENSOR:
                continue
            hook = _UNPACK_HOOK(item)
            if hook is None:
                held += _tensors(_PACKED(item))
            elif type(hook) is not _FUNCTION or _CODE(hook).co_filename != CHECKPOINT_FILE:
                name = _QUALNAME(hook) if type(hook) is _FUNCTION else _TYPE_NAME(type(hook))
                _name(hidden, f"saved-tensor hooks {str(name)[:80]!r}")
    return [function for function, _ in edges], held


def _name(hidden: list, what: str) -> None:
    if what not in hidden and len(hidden) < 10:
        hidden.append(what)


def module_tensors(model, kinds: tuple[str, ...] = ("_parameters",)) -> list:
    """The tensors a module tree registers under `kinds` (`_parameters`, `_buffers`), in
    `model.parameters()`'s order (each module's own, then its children's, depth first; a shared
    one once), read from the modules' own dicts: `torch.nn.Module`'s methods are the submission's
    to rebind, and a tensor it made them yield would count as the caller's."""
    found, seen, todo = [], set(), [model]
    while todo:
        attributes = _GETATTR(todo.pop(), "__dict__")
        for kind in kinds:
            for tensor in _VALUES(attributes[kind]):
                if tensor is not None and id(tensor) not in seen:
                    seen.add(id(tensor))
                    found.append(tensor)
        todo += [m for m in _VALUES(attributes["_modules"]) if m is not None][::-1]
    return found


def _tensors(value, depth: int = 0, modules: bool = False):
    """The tensors among `value` (and its lists, tuples and dicts, exactly those types), with a
    module's parameters and buffers where `modules` (the caller's own model)."""
    if depth > MAX_DEPTH:
        return
    kind = type(value)
    if issubclass(kind, _TENSOR):
        yield value
    elif modules and issubclass(kind, _MODULE):
        yield from module_tensors(value, ("_parameters", "_buffers"))
    elif kind is dict:
        for item in _VALUES(value):
            yield from _tensors(item, depth + 1, modules)
    elif kind in (list, tuple):
        for item in value:
            yield from _tensors(item, depth + 1, modules)
