"""Sealed copies of the grader's code that measures a submission and answers for it.

The stage child runs the submission in the grader's own interpreter, where
`object.__subclasses__()` finds every class, the grader's too, and a class's methods lead
through `__globals__` to their module's dict: setting a name there, or a class attribute, raises
no audit event (PEP 578 has none for either). So the path from "call the graded function" to
"answer on the wire" must look nothing up where the submission can write:

- `seal(modules)` copies each function of `modules` onto a private dict of its module's names
  (taken before the submission loads, with the builtins frozen in): a name it looks up at call
  time is read there, and no object the submission can reach holds that dict. A function of a
  sealed module that it names (`wire.encode`), or that a module-level table holds
  (`probes.PROBES`), is the sealed copy; a module-level dict, list or set is a copy of its own
  (the original's contents are the submission's to change). What the modules bind at import
  (torch's descriptors, the C functions they call) is bound for good.
- The modules sealed define no class on that path (a class attribute is found and rebound like
  any other): their state is closures, `types.SimpleNamespace`, dicts and tuples, whose types'
  attributes cannot be set.

`tests/redteam/forge_subclasses_*.py` are the attacks; `tests/test_provenance.py` checks the
seal in-process.
"""

from __future__ import annotations

import builtins
import types

Sealed = dict  # {module name: types.SimpleNamespace of its sealed functions and names}


def seal(modules: tuple[types.ModuleType, ...]) -> Sealed:
    """{module name: namespace}: each module's names, its functions copied onto a private dict
    of its own (`__globals__`), functions and module references among `modules` replaced by their
    sealed copies. Call it before the submission loads."""
    frozen = {k: v for k, v in vars(builtins).items() if not k.startswith("__")}
    spaces = {m.__name__: {**frozen, **vars(m)} for m in modules}
    copies = {}  # id(original function) -> sealed copy
    for module in modules:
        space = spaces[module.__name__]
        for value in vars(module).values():
            if type(value) is types.FunctionType and value.__globals__ is vars(module):
                copies[id(value)] = _copy(value, space)
    namespaces = {name: types.SimpleNamespace() for name in spaces}
    for name, space in spaces.items():
        for key, value in list(space.items()):
            if id(value) in copies:
                space[key] = copies[id(value)]
            elif type(value) is types.ModuleType and value.__name__ in namespaces:
                space[key] = namespaces[value.__name__]
            elif type(value) is dict:  # a table of functions (`probes.PROBES`): its copies
                space[key] = {k: copies.get(id(v), v) for k, v in value.items()}
            elif type(value) in (list, set):
                space[key] = type(value)(copies.get(id(v), v) for v in value)
        vars(namespaces[name]).update(space)
    return namespaces


def _copy(function: types.FunctionType, space: dict) -> types.FunctionType:
    """`function` with `space` for globals: its code, defaults and closure are its own."""
    copy = types.FunctionType(function.__code__, space, function.__name__, function.__defaults__,
                              function.__closure__)
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__, copy.__doc__ = function.__qualname__, function.__doc__
    return copy
