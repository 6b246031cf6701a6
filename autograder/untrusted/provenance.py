"""Provenance: the grader grades the code it read, and the stage child refuses to make any other.

The grader reads a submission as text (`course/submissions/reader.py`) and judges that text; the
stage child runs it. Its loader compiles that text itself (`Provenance.compile_read`: every file
and cell of the submission, every helper the helper finder may serve; every code object nested in
them is "read") before the submission's first line runs, and then arms an audit hook (PEP 578;
`sys.addaudithook`; a hook cannot be removed) that REFUSES, with a RuntimeError that says what was
refused, whatever would make or reach code the grader did not read:
- `compile` (so `exec` and `eval` of text, however the builtin was reached) of anything but the
  text of a library file as its disk holds it (an import), an AST `ast.parse` asks for, and the
  code the standard library writes from names (`dataclasses`' methods, `namedtuple`'s, a `typing`
  forward reference): that text is kept (`captured`) as evidence for the copy rule;
- code objects built or replaced (`code.__new__`, `code.replace`), unmarshalled outside an import,
  a function made of code that was not read, a function's `__code__` rebound;
- `ctypes`, a sub-interpreter (its own hooks see nothing), a tracer, another audit hook (it would
  be handed the frames this one sees), and what reaches the grader's objects, which share this
  process: frames (`sys._getframe`, a traceback's or generator's frame) unless the standard
  library's own readers ask, which keep a name or text and hand no frame on (logging's caller,
  `typing`, `namedtuple`, `enum`, `warnings`, `traceback`'s text), or, for `sys._getframe`, a
  library's code that names it itself (`typing_extensions`; not `functools.cached_property`
  handed it, nor `inspect.currentframe`, which returns the frame), the garbage collector's
  object walks and `sys._current_frames`.
The hook is a closure over plain locals built before the submission loads: nothing it consults
is looked up on a class or module at call time, so nothing the submission reaches rebinds it.

After loading, each graded function, and what of the submission's it reaches (`unread`: the
globals its code names, its closure, defaults, `__wrapped__`, partials, bound methods, the
submission's classes and helper modules, the values of dicts, lists and tuples it names, and what
a library's wrapper holds: a decorator's closure, `lru_cache`'s function), must be read code, code
of `course` the grader sent, or of an installed module as its file says.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import dataclasses
import enum
import functools
import gc
import logging
import os
import sys
import traceback
import types
import typing
import warnings

import torch

from autograder.protocol.markers import GIVEN_HEAD_EVENT

MAX_CAPTURED = 100  # source texts kept: they travel in the load report (wire.MAX_HEADER_BYTES)
MAX_CAPTURED_CHARS = 2**19  # in all
MAX_TEXT_CHARS = 2**15  # of one (wire.MAX_STRING cuts a longer string)
MAX_VISITED = 20_000  # functions and containers `unread` follows for one graded function
PLAIN = {int, float, complex, bool, str, bytes, type(None)}  # hold no code
FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame"}
REFUSED = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
           "sys.settrace", "sys.setprofile", "sys.addaudithook", "cpython.PyInterpreterState_New"}
REBOUND = {"__code__", "__defaults__", "__kwdefaults__"}
GRADER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # autograder/
# where the library's files lie: the interpreter's, the installed packages' (also where a .pth
# file or the user's site puts them, outside sys.prefix), the grader's own; read as the template
# imports this, before a submission's folder joins sys.path
LIBRARY_ROOTS = tuple(sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, GRADER}
                             | {p for p in sys.path if os.path.isabs(p) and os.path.isdir(p)
                                and p != os.sep}))
COURSE = "<course>/"  # the file names of the `course` modules the grader sent
WHY = {  # what each refusal says: what was refused, so that an honest student knows what to change
    "compile": "compile() of text that is not your submission's (exec, eval, compile of a "
               "string) is refused while grading: what it makes is not the code the grader read",
    "code": "building or replacing a code object (code.__new__, code.replace, marshal.loads, "
            "types.FunctionType of such code, setting __code__) is refused while grading",
    "frames": "frames are refused while grading (sys._getframe, inspect.currentframe, a "
              "traceback's tb_frame): they would reach the grader's own objects in this process",
    "ctypes": "ctypes is refused while grading: it reaches the grader's memory in this process",
    "given": "the given chunked head (course.chunked_head) is imported once while grading",
}


def _nested(code: types.CodeType):
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _nested(constant)


def _names(code: types.CodeType) -> set[str]:
    return {name for inner in _nested(code) for name in inner.co_names + inner.co_freevars}


def _codes_calling(names: set[str], *owners) -> set[types.CodeType]:
    """The code objects (nested ones too) of `owners`' functions and methods that name one of
    `names`: the standard library's readers of frames, found, not listed by hand."""
    found = set()
    for owner in owners:
        values = [owner] if callable(owner) and not isinstance(owner, type) else \
            [v for value in vars(owner).values()
             for v in ([value] if not isinstance(value, type) else vars(value).values())]
        for value in values:
            value = getattr(value, "__func__", value)
            for code in _nested(getattr(value, "__code__", None) or (lambda: 0).__code__):
                if names & set(code.co_names):
                    found.add(code)
    return found


def _frame_policy() -> tuple[frozenset, frozenset]:
    """(readers, passers): the standard library's code that may ask for a frame because it keeps
    only a name or text of it; the code that hands a frame on, allowed only on its way to a
    reader (logging's `currentframe` to `findCaller`, `walk_tb` to `StackSummary`)."""
    import inspect

    passers = {logging.currentframe.__code__, inspect.currentframe.__code__,
               traceback.walk_tb.__code__, traceback.walk_stack.__code__,
               traceback._walk_tb_with_full_positions.__code__}
    passers |= {c for c in _nested(traceback.StackSummary.extract.__func__.__code__)
                if c.co_name == "extended_frame_gen"}
    readers = _codes_calling({"_getframe", "currentframe"}, logging, typing, enum, warnings,
                             collections.namedtuple, traceback.print_stack,
                             traceback.format_stack, traceback.extract_stack)
    readers.add(traceback.StackSummary._extract_from_extended_frame_gen.__func__.__code__)
    return frozenset(readers - passers), frozenset(passers)


def _handers() -> frozenset:
    """Library code that names `sys._getframe` and returns the frame (or the stack) to its
    caller: allowed only on its way to a reader."""
    import inspect

    return frozenset({inspect.currentframe.__code__, inspect.stack.__code__,
                      inspect.getouterframes.__code__, logging.currentframe.__code__,
                      traceback.walk_stack.__code__})


def _inner(item) -> list:
    """What a library's callable object holds (`lru_cache`'s wrapped function, which no
    attribute tells truly): the grader's own use of an object walk the hook refuses to others."""
    return gc.get_referents(item)


def _compiler(read: set, origins: set, loading: list):
    """compile_read(text, filename): compile submission text the trusted side read; every code
    object in it is read (`read`), its file name an origin."""

    def compile_read(text: str, filename: str) -> types.CodeType:
        loading[0] = True
        try:
            code = compile(text, filename, "exec")
        finally:
            loading[0] = False
        read.update(_nested(code))
        origins.add(filename)
        return code

    return compile_read


def _capturer(captured: list):
    """capture(origin, source): keep a source text as evidence in `captured`, within the caps."""
    chars = [0]

    def capture(origin: str, source) -> None:
        text = _text(source)
        if text is None or len(captured) >= MAX_CAPTURED \
                or any(text == kept for _, kept in captured):
            return
        text = text[:min(MAX_TEXT_CHARS, MAX_CAPTURED_CHARS - chars[0])]
        if text:
            chars[0] += len(text)
            captured.append((origin, text))

    return capture


class Provenance:
    """The submission's read code, the text the library wrote for it, and the hook that refuses
    the rest."""

    def __init__(self, course: dict[str, types.CodeType], helpers: dict[str, str]):
        """`course`: {module: code} as the course finder serves it; `helpers`: {file name: text}
        of the helpers the finder may serve, compiled here as read code."""
        self._course = {code.co_filename: set(_nested(code)) for code in course.values()}
        self.helpers = {}  # {file name: code}, for the helper finder
        self.read: set[types.CodeType] = set()  # by equality: a code object is its bytecode
        self.origins: set[str] = set()  # file names the loader compiled the submission under
        self.namespaces: list[dict] = []  # the submission's module dicts
        self.captured: list[tuple[str, str]] = []  # (origin, source text)
        self.generated: set[types.CodeType] = set()  # dataclass and namedtuple methods
        self._loading = [False]
        self.given_calls = [0]  # calls into the given chunked head: only the hook adds to it
        # closures, not methods: the loader binds them before the submission runs, and nothing
        # it calls afterwards looks an attribute up on this object (a property the submission
        # set on the class would be handed the object, and its `given_calls` with it)
        self.compile_read = _compiler(self.read, self.origins, self._loading)
        self.capture = _capturer(self.captured)
        for name, text in helpers.items():
            with contextlib.suppress(SyntaxError, ValueError, RecursionError, MemoryError):
                self.helpers[name] = self.compile_read(text, name)

    # ---- the audit hook --------------------------------------------------------------------
    def arm(self, roots: tuple[str, ...] = (), refuse_text: bool = True, given=None) -> None:
        """Refuse from now on (before the submission's first line runs); `roots`: where the
        submission's own files lie on disk (an importable module's folder), imported as text;
        `refuse_text` False (`--allow-reference`, an instructor's check): text compiled at run
        time is only captured, and code unmarshalled is let be; `given`: the given head
        module's code, already run (`_hook`)."""
        sys.addaudithook(_hook(self, tuple(roots), refuse_text, given))
        _freeze_builtins()

    # ---- judging a graded function ---------------------------------------------------------
    def unread(self, function) -> str | None:
        """Why `function`, or code of the submission it reaches, is not code the grader read;
        None when all of it was read (`judge`)."""
        return judge(self)(function)


def judge(provenance: Provenance):
    """unread(function): why `function`, or code of the submission it reaches, is not code the
    grader read; None when all of it was read. Closures over `provenance`'s sets and lists, bound
    now, and no method of a class: the stage child builds it from its sealed copy of this module
    (`autograder.untrusted.seal`) before the submission loads, so rebinding `Provenance`'s
    attributes or this module's names changes no verdict."""
    read, generated, namespaces = provenance.read, provenance.generated, provenance.namespaces

    def ours(namespace: dict) -> bool:
        return any(namespace is n for n in namespaces)

    held, library = _holding(ours), _from_library(ours, provenance._course)

    def function_rule(function: types.FunctionType, todo: list) -> str | None:
        code = function.__code__
        todo += [c.cell_contents for c in function.__closure__ or () if _filled(c)]
        todo += [getattr(function, "__wrapped__", None)]  # a decorator's, the library's too
        if code in read:
            names = _names(code)
            todo += [function.__globals__[n] for n in names if n in function.__globals__]
            todo += [function.__defaults__ or (), function.__kwdefaults__ or {}]
            return None
        if code in generated or library(function):
            return None
        return (f"`{function.__qualname__}` was not compiled from the submission's text "
                f"(its code says {code.co_filename!r} line {code.co_firstlineno}): code built "
                "at run time from a string, bytes or a constant is not code the grader read")

    def unread(function) -> str | None:
        todo, seen = [function], set()
        while todo:
            item = todo.pop()
            if type(item) in PLAIN or isinstance(item, torch.Tensor) or id(item) in seen:
                continue
            seen.add(id(item))
            if len(seen) > MAX_VISITED:
                return (f"what `{getattr(function, '__qualname__', function)}` reaches is too "
                        f"large to follow (over {MAX_VISITED:,} functions and containers)")
            if isinstance(item, types.FunctionType):
                why = function_rule(item, todo)
                if why:
                    return why
            else:
                todo += held(item)
        return None

    return unread


def _holding(ours):
    """held(item): what `item`, not a function, holds that may be code; `ours(namespace)`:
    whether a module dict is the submission's."""

    def held(item) -> list:
        if isinstance(item, (staticmethod, classmethod, types.MethodType)):
            return [item.__func__]
        if isinstance(item, functools.partial):
            return [item.func, *item.args, *item.keywords.values()]
        if isinstance(item, property):
            return [item.fget, item.fset, item.fdel]
        if isinstance(item, (dict, list, tuple, set, frozenset)):
            return list(dict.values(item) if isinstance(item, dict) else item)
        if isinstance(item, type):
            theirs = ours(vars(sys.modules.get(item.__module__, types)))
            return list(vars(item).values()) if theirs or not _found_where_it_says(item) else []
        if isinstance(item, types.ModuleType):
            theirs = ours(vars(item)) or sys.modules.get(item.__name__) is not item
            return [vars(item)] if theirs else []  # the submission's, or one made at run time
        if ours(vars(sys.modules.get(type(item).__module__, types))) \
                and isinstance(getattr(item, "__dict__", None), dict):
            return [type(item), item.__dict__]  # an object of the submission's own class
        if callable(item) and not isinstance(item, (types.BuiltinFunctionType, torch.nn.Module)):
            # a library's wrapper: what it holds (not the classes it builds its results of)
            return [getattr(item, "__wrapped__", None),
                    *(inner for inner in _inner(item) if not isinstance(inner, type))]
        return []

    return held


def _from_library(ours, course: dict):
    """library(function): a function of `course` as the grader sent it (`course`: {file name:
    its code objects}), or of an installed module loaded as its file says."""

    def library(function: types.FunctionType) -> bool:
        code, filename = function.__code__, function.__code__.co_filename
        if ours(function.__globals__):
            return False
        if filename in course:
            return code in course[filename]
        module = sys.modules.get(function.__globals__.get("__name__"))
        return module is not None and vars(module) is function.__globals__ \
            and filename == getattr(module, "__file__", None) \
            and filename.startswith(LIBRARY_ROOTS + ("<frozen ",))

    return library


def _hook(provenance: Provenance, theirs: tuple[str, ...], refuse_text: bool, given):
    """The audit hook: a closure over plain locals bound here, which raises RuntimeError on what
    it refuses. Nothing it runs looks a name up in a module or on a class (a submission that
    reached one could rebind it), nor calls a method of an object the submission made (its code
    would run while the hook is busy): type checks are `type(x) is`, text is copied with the
    built-in types' own methods. `theirs`: the submission's folders (an importable module's);
    `given`: the code of the given chunked head's module, run once before the submission loads
    (its functions raise GIVEN_HEAD_EVENT, counted in `given_calls`)."""
    compiled = _text_rule(provenance, LIBRARY_ROOTS + theirs, refuse_text)
    to_a_reader = _frame_rule(provenance.read, theirs)
    writers = _writers()
    inner, code_type, function_type = _inner.__code__, types.CodeType, types.FunctionType
    getframe, busy, loading, error, why_of = sys._getframe, [False], provenance._loading, \
        RuntimeError, dict(WHY)
    read, generated = provenance.read, provenance.generated
    library_frame, importing_library = _library_rule(read, theirs)
    refused, frame_attributes, rebound = frozenset(REFUSED), frozenset(FRAME_ATTRIBUTES), \
        frozenset(REBOUND)
    startswith, as_str, type_of = str.startswith, str.__str__, type  # bound, as builtins are
    given_calls = provenance.given_calls

    def nested(code, found: set) -> None:
        found.add(code)
        for constant in code.co_consts:
            if type_of(constant) is code_type:
                nested(constant, found)

    def decide(event: str, args: tuple, caller) -> str | None:
        if event == GIVEN_HEAD_EVENT:
            given_calls[0] += 1
            return None
        if event == "compile":
            return compiled(args, caller)
        if event == "exec":
            if caller.f_code in writers and type_of(args[0]) is code_type:
                nested(args[0], generated)
            return "given" if given is not None and args[0] is given else None
        if event in refused:
            return None if event == "gc.get_referents" and caller.f_code is inner else event
        if event == "sys._getframe":
            return None if to_a_reader(caller, "_getframe") else "frames"
        if event == "object.__getattr__" and args[1] in frame_attributes:
            return None if to_a_reader(caller, None) else "frames"
        if startswith(event, "ctypes."):
            return "ctypes"
        if event == "code.__new__" or (event == "marshal.loads" and refuse_text and not
                                       startswith(as_str(caller.f_code.co_filename), "<frozen")):
            return "code"
        if event == "function.__new__":
            return None if args[0] in read or args[0] in generated \
                or library_frame(caller) else "code"
        if (event == "object.__setattr__" or event == "object.__delattr__") \
                and type_of(args[0]) is function_type and args[1] in rebound:
            if args[1] == "__code__":
                return "code"
            return None if args[0].__code__ in read or library_frame(caller) else "code"
        return None

    def hook(event: str, args: tuple) -> None:
        if busy[0] or loading[0]:
            return
        busy[0] = True
        try:
            caller = getframe(1)
            why = decide(event, args, caller)
            if why is not None and why != "given" and importing_library(caller):
                why = None
        finally:
            busy[0] = False
        if why is not None:
            raise error(why_of[why] if why in why_of else
                        f"{why} is refused while grading: it would reach the grader's own "
                        "objects in this process")

    return hook


def _library_rule(read: set, theirs: tuple[str, ...]):
    """(library_frame, importing_library), closures over plain locals as the hook is: what a
    library's own code may do that the submission's may not."""
    library, startswith, as_str = LIBRARY_ROOTS, str.startswith, str.__str__

    def library_frame(caller) -> bool:
        """A frame of a library file's code, not the submission's (transformers' `copy_func`
        copying a function it holds as its auto classes load). Library code can only copy or
        run code that exists, and no unrevealed reference's code is in the process."""
        filename = as_str(caller.f_code.co_filename)
        return caller.f_code not in read and startswith(filename, library) \
            and not startswith(filename, theirs)

    def importing_library(caller) -> bool:
        """A library module's first import, run from a graded call (torch imports sympy, and sympy
        mpmath, lazily): library files' code all the way down to the import machinery (no frame
        of the submission's between) may write code and walk its own frames as its module body
        does. It runs from its own files; no unrevealed reference's text is in the process, and
        a graded function is judged again before every call."""
        frame, depth = caller, 0
        while frame is not None and depth < 64:
            if startswith(as_str(frame.f_code.co_filename), "<frozen importlib"):
                return depth > 0  # every frame above the import machinery was the library's
            if not library_frame(frame):  # the submission's code, or its trampoline's caller
                return False
            frame, depth = frame.f_back, depth + 1
        return False

    return library_frame, importing_library


def _writers() -> dict:
    """{code that writes text from names: the file of the only code that may ask it, or None}:
    dataclasses' writer (asked by dataclasses itself, not by a caller of its private function),
    namedtuple, a `typing` forward reference (an annotation of the submission's own text)."""
    return {dataclasses._create_fn.__code__: dataclasses.__file__,
            collections.namedtuple.__code__: None, typing.ForwardRef.__init__.__code__: None}


def _text_rule(provenance: Provenance, roots: tuple[str, ...], refuse_text: bool):
    """compiled(args, caller): None where a `compile` event may go on (an import of a file under
    `roots` as the disk holds it, an AST, text the library wrote from names; any text where not
    `refuse_text`), else "compile"; the text the submission's line led to is kept as evidence."""
    parse, writers, read, captured = ast.parse.__code__, _writers(), provenance.read, \
        provenance.captured
    budget = [MAX_CAPTURED, MAX_CAPTURED_CHARS]
    startswith, as_str, decode, opened, is_sub = str.startswith, str.__str__, bytes.decode, \
        open, issubclass
    type_of, text_type, view, os_error, text_cap, text_length = type, str, memoryview, OSError, \
        MAX_TEXT_CHARS, len
    binary = (bytes, bytearray, memoryview)

    def text_of(source) -> str | None:
        kind = type_of(source)
        if is_sub(kind, text_type):
            return as_str(source)
        if is_sub(kind, binary):
            return decode(view.tobytes(view(source)), "utf-8", "replace")
        return None

    def genuine(text: str, filename: str) -> bool:
        if not startswith(filename, roots):
            return False
        try:
            with opened(filename, "rb") as handle:
                return handle.read() == text.encode()
        except os_error:
            return False

    def origin(frame, filename: str) -> str:
        """The submission's line that led to run-time code; "" where none did."""
        while frame is not None:
            if frame.f_code in read:
                return f"compiled at run time as {filename!r} from " \
                       f"{as_str(frame.f_code.co_filename)} line {frame.f_lineno}"
            frame = frame.f_back
        return ""

    def by_library(caller) -> bool:
        if caller.f_code not in writers:
            return False
        home = writers[caller.f_code]
        return home is None or (caller.f_back is not None
                                and as_str(caller.f_back.f_code.co_filename) == home)

    def compiled(args: tuple, caller) -> str | None:
        text = text_of(args[0])
        filename = as_str(args[1]) if is_sub(type_of(args[1]), text_type) else "?"
        if caller.f_code is parse or (text is not None and genuine(text, filename)):
            return None
        allowed = not refuse_text or (text is not None and by_library(caller))
        line = origin(caller, filename)
        if text and (not allowed or line) and budget[0] > 0 and budget[1] > 0:
            text = text[:text_cap if text_cap < budget[1] else budget[1]]
            budget[0], budget[1] = budget[0] - 1, budget[1] - text_length(text)
            captured.append((line or f"refused: compiled at run time as {filename!r}", text))
        return None if allowed else "compile"

    return compiled


def _frame_rule(read: set, theirs: tuple[str, ...]):
    """to_a_reader(frame, named): whether a frame asked for goes to a reader through passers
    only (`_frame_policy`); `named`: also a library's own code that names it (`sys._getframe` in
    its text: not a callable it was handed, as `functools.cached_property` is), unless it is one
    that hands frames on (`_handers`), or the submission's (read, or under `theirs`)."""
    readers, passers = _frame_policy()
    handers = passers | _handers()
    library, startswith, as_str = LIBRARY_ROOTS, str.startswith, str.__str__

    def to_a_reader(frame, named: str | None) -> bool:
        steps = 6
        while frame is not None and steps:
            code = frame.f_code
            if code in readers:
                return True
            if code not in passers:
                filename = as_str(code.co_filename)
                return named is not None and named in code.co_names and code not in read \
                    and code not in handers and startswith(filename, library) \
                    and not (theirs and startswith(filename, theirs))
            frame, steps = frame.f_back, steps - 1
        return False

    return to_a_reader


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
