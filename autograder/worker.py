"""The worker: a fresh interpreter that loads the submission and answers probe requests.

Started by `autograder.sandbox.Worker` as `python -I worker.py RESULT_FD REPO_ROOT` in an empty
temporary directory, with a scrubbed environment and resource limits. Requests arrive on stdin
(pickled by the trusted parent); responses leave on RESULT_FD as plain data in the format of
`autograder.wire`, which the parent checks before it builds anything. Whatever the student's code prints goes
to a log file, never to the grader's terminal.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import sys
import types
from collections import Counter


def _receive():
    """The next request (a pickle from the trusted parent), or None when the parent closed stdin."""
    from autograder import wire  # first imported here, before the submission is loaded

    try:
        return pickle.loads(wire.read_frame(0, None, cap=2**40))
    except wire.Closed:
        return None


def _send(fd: int, message: dict) -> None:
    """Answer in the wire format the parent decodes (`autograder.wire`), never a pickle."""
    from autograder import wire

    wire.write_frame(fd, wire.encode(message))


def _exec_statements(unit: dict, errors: list) -> dict:
    module = types.ModuleType(f"submission_{unit['name'].split('.')[0]}")
    module.__file__ = unit["name"]
    sys.modules[module.__name__] = module
    for label, source in unit["statements"]:
        try:
            exec(compile(source, label, "exec"), module.__dict__)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt included
            errors.append(f"{label}: {type(exc).__name__}: {exc}")
    return vars(module)


def load(config: dict):
    from autograder.probes import SubmissionState
    from autograder.reference import (
        GRADED_FUNCTIONS,
        install_counters,
        is_reference,
        reference,
        reference_wrappers,
    )

    submission, errors = config["submission"], []
    counter = Counter()
    kind, target = submission["kind"], submission["target"]
    if kind == "module" and target == "course":  # grading the reference itself
        functions = {name: reference(name) for name in GRADED_FUNCTIONS}
        statuses = {name: "ok" for name in GRADED_FUNCTIONS}
        return SubmissionState(functions, statuses, config["device"]), errors
    install_counters(reference_wrappers(counter))  # before the submission binds any name
    namespaces = []
    if kind == "module":
        try:
            namespaces.append(vars(importlib.import_module(target)))
        except BaseException as exc:
            errors.append(f"import {target}: {type(exc).__name__}: {exc}")
    elif kind == "py":
        sys.path.insert(0, os.path.dirname(target))
        module = types.ModuleType("submission")
        module.__file__ = target
        sys.modules["submission"] = module
        try:
            with open(target, encoding="utf-8") as handle:
                exec(compile(handle.read(), target, "exec"), module.__dict__)
        except BaseException as exc:
            errors.append(f"{os.path.basename(target)}: {type(exc).__name__}: {exc}")
        namespaces.append(vars(module))
    else:
        namespaces = [_exec_statements(unit, errors) for unit in submission["units"]]
    functions, statuses = {}, {}
    for name in GRADED_FUNCTIONS:
        if kind == "units":
            index = submission["providers"].get(name)
            function = namespaces[index].get(name) if index is not None else None
        else:
            function = namespaces[0].get(name) if namespaces else None
        functions[name] = function
        if function is None:
            statuses[name] = "missing"
        elif not callable(function):
            statuses[name] = "not_callable"
        elif is_reference(function, name):
            statuses[name] = "delegated"
        else:
            statuses[name] = "ok"
    return SubmissionState(functions, statuses, config["device"], counter), errors


def main() -> None:
    result_fd, root = int(sys.argv[1]), sys.argv[2]
    sys.path.insert(0, root)
    import torch

    torch.set_num_threads(1)
    from autograder.probes import handle, to_plain

    config = _receive()
    state, errors = load(config)
    _send(result_fd, {"status": "ready", "statuses": dict(state.statuses), "errors": errors})
    while True:
        request = _receive()
        if request is None:
            break
        try:
            response = handle(state, request)
        except BaseException as exc:  # a probe must answer, whatever the submission did
            response = {"status": "error", "error_type": type(exc).__name__,
                        "message": str(exc)[:500], "is_value_error": False,
                        "is_runtime_error": False, "not_implemented": False}
        _send(result_fd, to_plain(response))


if __name__ == "__main__":
    main()
