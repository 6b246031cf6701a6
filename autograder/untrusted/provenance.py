"""Provenance: whether the code the grader calls is the code it read, seen where code is made.

The grader reads a submission as text (`course/submission.py`) and judges that text; the stage
child runs it. So a graded function counts only if its code object was compiled by the worker's
own loader from that text (`Provenance.compile_read`: every file and cell of the submission, every
helper the helper finder served; every code object nested in them is "read"), and so are the
submission's functions it reaches (`unread`: the globals its code names, its closure, defaults,
`__wrapped__`, partials, bound methods, the submission's classes and helper modules, and the
values of dicts, lists and tuples it names). Code compiled at run time from a string, bytes or a
constant (`exec` however it was reached, `getattr(print.__self__, "exec")` included; `marshal`; a
code object built or replaced) is never read, whatever file and line it claims.

An audit hook (PEP 578; `sys.addaudithook`, installed before the submission loads; a hook cannot
be removed) sees the rest where it happens:
- `compile` of source text, and code objects built (`code.__new__`) or unmarshalled, by anyone but
  the loader: the text is kept (`captured`: (origin, text) pairs the trusted side reads as it reads
  the submission's files), and a function compiled there cannot pass as the library's;
- what would reach the grader's own objects, which share this process: frames (`sys._getframe`,
  `sys._current_frames`, a traceback's or generator's frame), the garbage collector's object walks,
  tracing, rebinding the code or defaults of a function that is not the submission's. Each is
  refused (RuntimeError) unless the standard library's own code asks, to read a name and hand
  nothing back (logging's caller lookup, namedtuple, enum, typing, traceback's summaries).
"""

from __future__ import annotations

import ast
import collections
import contextlib
import dataclasses
import functools
import logging
import os
import sys
import traceback
import types

import torch

MAX_CAPTURED = 100  # source texts kept: they travel in the load report (wire.MAX_HEADER_BYTES)
MAX_CAPTURED_CHARS = 2**19  # in all
MAX_TEXT_CHARS = 2**15  # of one (wire.MAX_STRING cuts a longer string)
MAX_VISITED = 20_000  # functions and containers `unread` follows for one graded function
PLAIN = {int, float, complex, bool, str, bytes, type(None)}  # hold no code
FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame"}
REFUSED = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames"}
TRACING = {"sys.settrace", "sys.setprofile"}  # a tracer sees every frame, the grader's too
REBOUND = {"__code__", "__defaults__", "__kwdefaults__"}
GRADER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # autograder/
# where the library's files lie: the interpreter's, the installed packages' (also where a .pth
# file or the user's site puts them, outside sys.prefix), the grader's own; read as the template
# imports this, before a submission's folder joins sys.path. A file there that the submission
# compiled text under is tainted all the same (`_watch`), so a forged name gains nothing.
LIBRARY_ROOTS = tuple(sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, GRADER}
                             | {p for p in sys.path if os.path.isabs(p) and os.path.isdir(p)
                                and p != os.sep}))
COURSE = "<course>/"  # the file names of the `course` modules the grader sent


def _nested(code: types.CodeType):
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _nested(constant)


def _names(code: types.CodeType) -> set[str]:
    return {name for inner in _nested(code) for name in inner.co_names + inner.co_freevars}


def _frame_helpers() -> tuple[set, set]:
    """(the standard library's functions that hand their caller a frame; those that walk a stack
    or a traceback, which hand frames on unless `traceback.StackSummary` consumes them for text)."""
    import inspect

    handing = {f.__code__ for f in (inspect.currentframe, inspect.stack, inspect.trace,
                                    inspect.getouterframes, inspect.getinnerframes,
                                    logging.currentframe)}
    walking = {traceback.walk_tb.__code__, traceback.walk_stack.__code__,
               traceback._walk_tb_with_full_positions.__code__}
    return handing, walking


class Provenance:
    """The submission's read code, what it compiled at run time, and the hook that watches."""

    def __init__(self, course: dict[str, str], helpers: dict[str, str]):
        """`course`: {module: source} as the grader sent it; `helpers`: {file name: text} of
        the helpers the finder may serve (their code is read when it is this text)."""
        self._course = {course_file(name, course): text for name, text in course.items()}
        self._course_code: dict[str, set] = {}  # compiled on demand, to tell a real one
        self._helpers = dict(helpers)
        self.read: set[types.CodeType] = set()  # by equality: a code object is its bytecode
        self.origins: set[str] = set()  # file names the loader compiled the submission under
        self.namespaces: list[dict] = []  # the submission's module dicts
        self.captured: list[tuple[str, str]] = []  # (origin, source text)
        self.tainted: set[str] = set()  # file names run-time code claimed
        self.generated: set[types.CodeType] = set()  # dataclass and namedtuple methods
        self.events = 0  # code made at run time from the submission's frames, so far
        self.last_event = ""  # where the latest was made
        self._loading = [False]
        self._captured_chars = 0

    # ---- the loader ------------------------------------------------------------------------
    def compile_read(self, text: str, filename: str) -> types.CodeType:
        """Compile submission text the trusted side read; every code object in it is read."""
        self._loading[0] = True
        try:
            code = compile(text, filename, "exec")
        finally:
            self._loading[0] = False
        self.read.update(_nested(code))
        self.origins.add(filename)
        return code

    def capture(self, origin: str, source) -> None:
        text = _text(source)
        if text is None or len(self.captured) >= MAX_CAPTURED \
                or any(text == kept for _, kept in self.captured):
            return
        text = text[:min(MAX_TEXT_CHARS, MAX_CAPTURED_CHARS - self._captured_chars)]
        if text:
            self._captured_chars += len(text)
            self.captured.append((origin, text))

    def read_helpers(self) -> None:
        for name, text in self._helpers.items():
            with contextlib.suppress(SyntaxError, ValueError, RecursionError, MemoryError):
                self.read.update(_nested(compile(text, name, "exec")))
                self.origins.add(name)

    # ---- the audit hook --------------------------------------------------------------------
    def install(self) -> None:
        """Watch from now on (before the submission loads). The hook holds what it needs in its
        closure: nothing it reads is reachable from the submission's code once frames are refused."""
        handing, walking = _frame_helpers()
        extract = traceback.StackSummary._extract_from_extended_frame_gen.__code__
        generators = (dataclasses._create_fn.__code__, collections.namedtuple.__code__)
        parse = ast.parse.__code__
        getframe, busy, me = sys._getframe, [False], self

        def asked_by_submission(caller) -> bool:
            """Whether a frame goes to the submission: it asked, or a helper that hands frames
            on (not to `traceback`'s text) was called by it."""
            for _ in range(4):
                if caller is None:
                    return False
                code = caller.f_code
                if code is extract:
                    return False
                if code not in handing and code not in walking:
                    return me._submission_code(code)
                caller = caller.f_back
            return True

        def hook(event: str, args: tuple) -> None:
            if busy[0] or me._loading[0]:
                return
            busy[0] = True
            try:
                me._watch(event, args, getframe, asked_by_submission, generators, parse)
            finally:
                busy[0] = False

        sys.addaudithook(hook)
        _freeze_builtins()

    def _submission_code(self, code: types.CodeType) -> bool:
        """Code of the submission: read, or made at run time (not a library's file)."""
        filename = code.co_filename
        return code in self.read or filename in self.tainted \
            or not filename.startswith(LIBRARY_ROOTS + ("<frozen ", COURSE))

    def _watch(self, event, args, getframe, asked_by_submission, generators, parse) -> None:
        if event in REFUSED or (event in TRACING and self._asked(getframe(2))):
            raise RuntimeError(f"{event} is not available while grading: it would reach the "
                               "grader's own objects in this process")
        if event == "sys._getframe" or (event == "object.__getattr__"
                                        and args[1] in FRAME_ATTRIBUTES):
            if asked_by_submission(getframe(2)):  # _watch, hook, then the code that asked
                raise RuntimeError("frames are not available while grading: they would reach "
                                   "the grader's own objects in this process")
        elif event == "object.__setattr__" and args[1] in REBOUND \
                and isinstance(args[0], types.FunctionType) and args[0].__code__ not in self.read \
                and self._submission_code(getframe(2).f_code):
            raise RuntimeError(f"setting {args[1]} of a function the submission did not write "
                               "is not available while grading")
        elif event == "compile":
            source, filename = args[0], str(args[1])
            if self._helpers.get(filename) == _text(source):
                self.capture(f"the helper module {filename}, served", source)
            elif self._course.get(filename) != _text(source) \
                    and not self._genuine_file(source, filename):
                self.tainted.add(filename)
                caller = getframe(2)
                if self._asked(caller) and caller.f_code is not parse:  # an AST is no code
                    origin = self._origin(caller, filename)
                    self.capture(origin, source)
                    if caller.f_code not in generators:
                        self._made(origin)
        elif event == "code.__new__":
            self.tainted.add(str(args[1]))
            if self._asked(getframe(2)):
                self._made(f"a code object built for {args[1]!r}")
        elif event == "marshal.loads" and not getframe(2).f_code.co_filename.startswith("<frozen"):
            self.tainted.add("*")  # not an import: any file name, what it holds is not known
            if self._asked(getframe(2)):
                self._made("code unmarshalled")
        elif event == "function.__new__" and args[0] not in self.read:
            self.tainted.add(args[0].co_filename)
            if self._asked(getframe(2)):
                self._made(f"a function made of the code of {args[0].co_filename!r}")
        elif event == "exec" and getframe(2).f_code in generators:
            self.generated.update(_nested(args[0]))

    def _asked(self, caller) -> bool:
        """Whether the submission's code made this code: it called the builtin itself (under any
        name), or the library function that did (the library's own code generation, as its
        imports run, does not count)."""
        return self._submission_code(caller.f_code) or \
            (caller.f_back is not None and self._submission_code(caller.f_back.f_code))

    def _made(self, origin: str) -> None:
        """Count code the submission made at run time: a graded call during which the count
        moves ran code the grader did not read."""
        self.events += 1
        self.last_event = origin

    @staticmethod
    def _genuine_file(source, filename: str) -> bool:
        """Whether `source` is the text of the library file it names (an import from disk)."""
        if not filename.startswith(LIBRARY_ROOTS) or not os.path.isfile(filename):
            return False
        try:
            with open(filename, "rb") as handle:
                disk = handle.read()
        except OSError:
            return False
        return disk == _text(source).encode()

    def _origin(self, frame, filename: str) -> str:
        """Where run-time code was compiled: the submission's line that led to it, if any."""
        while frame is not None:
            if frame.f_code in self.read:
                return f"compiled at run time as {filename!r} from {frame.f_code.co_filename} " \
                       f"line {frame.f_lineno}"
            frame = frame.f_back
        return f"compiled at run time as {filename!r}"

    # ---- judging a graded function ---------------------------------------------------------
    def unread(self, function) -> str | None:
        """Why `function`, or code of the submission it reaches, is not code the grader read;
        None when all of it was read."""
        todo, seen = [function], set()
        while todo:
            item = todo.pop()
            if type(item) in PLAIN or isinstance(item, torch.Tensor) or id(item) in seen:
                continue
            seen.add(id(item))
            if len(seen) > MAX_VISITED:
                return (f"what `{function.__qualname__}` reaches is too large to follow "
                        f"(over {MAX_VISITED:,} functions and containers)")
            if isinstance(item, (staticmethod, classmethod, types.MethodType)):
                todo.append(item.__func__)
            elif isinstance(item, functools.partial):
                todo += [item.func, *item.args, *item.keywords.values()]
            elif isinstance(item, property):
                todo += [item.fget, item.fset, item.fdel]
            elif isinstance(item, (dict, list, tuple, set, frozenset)):
                todo += list(dict.values(item) if isinstance(item, dict) else item)
            elif isinstance(item, type):
                if self._ours(vars(sys.modules.get(item.__module__, types))) \
                        or not _found_where_it_says(item):
                    todo += list(vars(item).values())
            elif isinstance(item, types.ModuleType):
                if self._ours(vars(item)) or sys.modules.get(item.__name__) is not item:
                    todo.append(vars(item))  # the submission's, or one made at run time
            elif isinstance(item, types.FunctionType):
                why = self._function(item, todo)
                if why:
                    return why
            elif self._ours(vars(sys.modules.get(type(item).__module__, types))) \
                    and isinstance(getattr(item, "__dict__", None), dict):
                todo += [type(item), item.__dict__]  # an object of the submission's own class
        return None

    def _ours(self, namespace: dict) -> bool:
        return any(namespace is n for n in self.namespaces)

    def _function(self, function: types.FunctionType, todo: list) -> str | None:
        code = function.__code__
        if code in self.read:
            names = _names(code)
            todo += [function.__globals__[n] for n in names if n in function.__globals__]
            todo += [c.cell_contents for c in function.__closure__ or () if _filled(c)]
            todo += [function.__defaults__ or (), function.__kwdefaults__ or {},
                     getattr(function, "__wrapped__", None)]
            return None
        if code in self.generated or self._library(function):
            return None
        return (f"`{function.__qualname__}` was not compiled from the submission's text "
                f"(its code says {code.co_filename!r} line {code.co_firstlineno}): code built "
                "at run time from a string, bytes or a constant is not code the grader read")

    def _library(self, function: types.FunctionType) -> bool:
        """A function of `course` as the grader sent it, or of an installed module loaded as its
        file says."""
        code, filename = function.__code__, function.__code__.co_filename
        if self._ours(function.__globals__):
            return False
        if filename in self._course:
            if filename not in self._course_code:
                self._course_code[filename] = set(_nested(compile(self._course[filename],
                                                                  filename, "exec")))
            return code in self._course_code[filename]
        if "*" in self.tainted or filename in self.tainted:
            return False
        module = sys.modules.get(function.__globals__.get("__name__"))
        return module is not None and vars(module) is function.__globals__ \
            and filename == getattr(module, "__file__", None) \
            and filename.startswith(LIBRARY_ROOTS + ("<frozen ",))


def _found_where_it_says(cls: type) -> bool:
    """Whether a class is the attribute its module and qualified name say (a library's class;
    one made at run time under a library's name is not)."""
    found = sys.modules.get(cls.__module__)
    for part in str(cls.__qualname__).split("."):
        found = getattr(found, part, None)
    return found is cls


def _freeze_builtins() -> None:
    """Give each module of the grader in this process its own copy of the builtins it looks up
    (`isinstance`, `len`, ...): a submission that rebinds them in `builtins` changes its own code,
    never the probes' measurements."""
    import builtins

    frozen = {k: v for k, v in vars(builtins).items() if not k.startswith("__")}
    for module in list(sys.modules.values()):  # the worker's `__main__` among them
        if str(getattr(module, "__file__", "")).startswith(GRADER):
            for key, value in frozen.items():
                vars(module).setdefault(key, value)


def course_file(name: str, modules) -> str:
    """The file name a `course` module is compiled under: `<course>/loop/tasks.py`, and
    `<course>/loop/__init__.py` for a package (a name other modules are under)."""
    parts = name.split(".")[1:]
    if name == "course" or any(other.startswith(name + ".") for other in modules):
        parts.append("__init__")
    return f"{COURSE}{'/'.join(parts)}.py"


def _text(source) -> str | None:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source).decode("utf-8", "replace")
    return source if isinstance(source, str) else None


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
        return True
    except ValueError:
        return False
