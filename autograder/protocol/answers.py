"""What the worker answers about a submission: one status per graded function, one error shape.

Both places that run student code (the sandboxed worker, and a notebook's own kernel for a
self-check) classify each graded function with `function_status` and turn a failure into an
`error_answer`, so the trusted side reads a single vocabulary (`autograder.trusted.grader`).
"""

from __future__ import annotations

import traceback

MESSAGE_CHARS = 500  # of an exception's message
TRACEBACK_CHARS = 1_500  # of the last frames of its traceback


def function_status(function, is_reference: bool) -> str:
    """"missing", "not_callable", "delegated" (it is the reference itself) or "ok"."""
    if function is None:
        return "missing"
    if not callable(function):
        return "not_callable"
    return "delegated" if is_reference else "ok"


def error_answer(error_type: str, message: str, trace: str = "", value_error: bool = False,
                 runtime_error: bool = False, not_implemented: bool = False) -> dict:
    """The answer for a call that did not return: what was raised (or what went wrong)."""
    return {"status": "error", "error_type": error_type, "message": message[:MESSAGE_CHARS],
            "traceback": trace[-TRACEBACK_CHARS:], "is_value_error": value_error,
            "is_runtime_error": runtime_error, "not_implemented": not_implemented}


def exception_answer(exc: BaseException) -> dict:
    """`error_answer` for an exception the submission raised."""
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return error_answer(type(exc).__name__, str(exc), "".join(frames[-3:]),
                        value_error=isinstance(exc, ValueError),
                        runtime_error=isinstance(exc, RuntimeError)
                        and not isinstance(exc, NotImplementedError),
                        not_implemented=isinstance(exc, NotImplementedError))
