"""The worker: a template process in the sandbox that forks one child per stage to grade it.

`autograder.trusted.sandbox.Sandbox` starts `python -I -B worker.py CONTROL_FD ROOT` inside
bubblewrap (or, for a practice grade, as a plain subprocess). The template imports torch,
transformers and, for notebooks, matplotlib once, builds the tokenizer, and waits on CONTROL_FD (a
Unix socket to the grader) for orders:
"fork" (with the child's request pipe, answer pipe and log file passed as descriptors) and "reap"
(end a child and every process of its user, delete all it could write: tier 1's /tmp, /dev/shm
and home, as that user; tier 2's private folder; say how it ended). It runs no student code.

Each child drops to its own user id (no capabilities, no new privileges, at most NPROC processes),
takes a seccomp filter and, in tier 2, Landlock (`autograder.untrusted.confine`),
installs the `course` modules the grader sent it (the stage under test, and later stages, as stubs:
see `autograder.trusted.reference.course_sources`), loads the submission (compiling its text
itself, under an audit hook, with the grader's modules out of its reach:
`autograder.untrusted.provenance`), and answers probe requests:
requests arrive on stdin (pickled by the trusted parent); responses leave on its answer pipe as
plain data in the format of `autograder.protocol.wire`, which the parent checks before it builds
anything. Whatever the student's code prints goes to a log file, never to the grader's terminal.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import pickle
import resource
import signal
import socket
import sys
import tempfile
import time
import traceback
import types

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38


def _channel(wire=None):
    """(receive, send), bound to the wire's functions now, before the submission loads: then the
    grader's modules leave `sys.modules`, and nothing the loop calls is looked up by name (`wire`:
    the sealed copy, `sealed`, whose globals the submission cannot reach).
    receive(): the next request (a pickle from the trusted parent), None when it closed stdin;
    send(fd, message): an answer in the wire format the parent decodes, never a pickle."""
    if wire is None:
        from autograder.protocol import wire

    read_frame, write_frame, encode, closed, loads = (wire.read_frame, wire.write_frame,
                                                      wire.encode, wire.Closed, pickle.loads)

    def receive():
        try:
            return loads(read_frame(0, None, cap=2**40))
        except closed:
            return None

    def send(fd: int, message: dict) -> None:
        write_frame(fd, encode(message))

    return receive, send


# Built in a namespace of its own (`_neutral`), with a copy of the builtins: what the submission
# reaches of these (the finders on `sys.meta_path`, the stubs' `__reference_called__`, the refused
# signal handlers) leads through `__globals__` to nothing of the grader's.
_NEUTRAL = """
class CodeFinder:
    \"\"\"Serves modules from code objects compiled before the submission loaded (`codes`:
    {module: code}; `packages`: names other modules are under; `top_level`: only where no
    package asks; `refused`: a prefix of names it refuses), never from the disk or text.\"\"\"

    def __init__(self, codes, packages, top_level, refused, extra_globals):
        self.codes, self.packages, self.top_level = codes, packages, top_level
        self.refused, self.extra_globals, self.served = refused, extra_globals, []

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.codes and (path is None or not self.top_level):
            return spec_from_loader(fullname, self, is_package=fullname in self.packages)
        if self.refused and fullname.startswith(self.refused):
            raise ModuleNotFoundError(f"No module named {fullname!r} (not available while "
                                      "grading)")
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        code = self.codes[module.__name__]
        module.__file__ = code.co_filename
        if module.__name__ in self.packages:
            module.__path__ = []
        module.__dict__.update(self.extra_globals)
        self.served.append(module.__name__)
        exec(code, module.__dict__)


def reference_stub(stage, counter):
    def reference_called(name):
        counter[name] = counter.get(name, 0) + 1
        raise RuntimeError(f"the reference course.{name} is not available while stage {stage} "
                           "is graded: write your own implementation (the references of "
                           "earlier stages are available)")
    return reference_called


def refusal(message):
    def refused(*args, **kwargs):
        raise RuntimeError(message)
    return refused
"""


def _neutral() -> dict:
    import builtins

    namespace = {"__builtins__": dict(vars(builtins)), "__name__": "grading",
                 "spec_from_loader": importlib.util.spec_from_loader}
    exec(compile(_NEUTRAL, "<grading>", "exec"), namespace)
    return namespace


NEUTRAL = _neutral()
CodeFinder = NEUTRAL["CodeFinder"]
# the modules on the path from a probe's call to its answer on the wire: sealed (`sealed`)
SEALED = ("autograder.protocol.answers", "autograder.protocol.saved_bytes",
          "autograder.protocol.wire", "autograder.untrusted.ranks", "autograder.untrusted.probes",
          "autograder.untrusted.provenance")


def sealed() -> dict:
    """{module: namespace} of `SEALED`'s sealed copies (`autograder.untrusted.seal`), made now,
    before the submission loads: what the probes, the wire and the ranks look up at call time
    is read in dicts no object of the submission's reach leads to."""
    from autograder.untrusted.seal import seal

    return seal(tuple(importlib.import_module(name) for name in SEALED))


def course_finder(sources: dict, extra_globals: dict):
    """The finder of `course` and `course.*`: the sources the grader sent, compiled here (the
    file names provenance knows them by), kept as code, not text."""
    from autograder.untrusted.provenance import course_file

    codes = {name: compile(text, course_file(name, sources), "exec")
             for name, text in sources.items()}
    packages = frozenset(name for name in sources
                         if name == "course" or any(o.startswith(name + ".") for o in sources))
    return CodeFinder(codes, packages, False, "course.", extra_globals)


# The `course` modules the template imported (`autograder.trusted.reference.template_sources`: no
# graded module among them, and none stubbed in any stage): every child keeps them as built.
_TEMPLATE_MODULES: tuple[str, ...] = ()


def install_course(sources: dict, extra_globals: dict | None = None):
    """Replace whatever `course` modules are loaded by those of `sources`, but for the template's
    own (`_TEMPLATE_MODULES`), which are kept; the finder that serves them."""
    for finder in [f for f in sys.meta_path if isinstance(f, CodeFinder) and not f.top_level]:
        sys.meta_path.remove(finder)
    finder = course_finder(sources, extra_globals or {})
    sys.meta_path.insert(0, finder)
    kept = {name: sys.modules[name] for name in _TEMPLATE_MODULES if name in sys.modules}
    for name in [n for n in sys.modules if n == "course" or n.startswith("course.")]:
        del sys.modules[name]
    sys.modules.update(kept)
    importlib.import_module("course")
    # each under its package: `course.loop.models` in `course.loop`
    for name, module in kept.items():
        parent, _, attribute = name.rpartition(".")
        setattr(sys.modules[parent], attribute, module)
    return finder


def _stand_in_for_selfcheck() -> None:
    """Notebooks import `autograder.selfcheck` for their check cells, which a grading never runs
    (only definitions are read): here that import finds a stand-in whose `self_check` does
    nothing, in both tiers (tier 2 cannot even read the real module, which drives the grader)."""
    module = types.ModuleType("autograder.selfcheck")
    # built in a namespace of its own: its globals lead nowhere in the grader
    module.self_check = eval("lambda *args, **kwargs: None", {"__builtins__": {}})
    sys.modules[module.__name__] = module


def _hide_grader() -> None:
    """Take the grader's modules out of `sys.modules` (all but the self-check stand-in), and
    this worker's `__main__`: no name or alias (`import sys as s; s.modules[...]`,
    `import __main__`) reaches the objects that measure and answer for the submission. An
    import of one finds nothing: the stand-in's package has no path."""
    kept = sys.modules["autograder.selfcheck"]
    package = types.ModuleType("autograder")
    package.__path__ = []
    package.selfcheck = kept
    for name in [n for n in sys.modules if n.split(".")[0] in ("autograder", "__main__")]:
        del sys.modules[name]
    sys.modules.update({"autograder": package, "autograder.selfcheck": kept,
                        "__main__": types.ModuleType("__main__")})


def load(config: dict, seals: dict | None = None):
    """The submission loaded, and what the grader needs to know of it: (state, errors, unread:
    {graded function: why its code is not the code the grader read}, captured: [(origin, source
    text)] that the library wrote for it, or that it tried to compile, or a helper it served).
    `seals`: the sealed modules (`sealed`) that build the state; sealed here where not given."""
    from autograder.protocol.markers import GIVEN_HEAD

    seals = seals or sealed()  # before the submission loads, like all it binds below
    submission_state = seals["autograder.untrusted.probes"].submission_state
    function_status = seals["autograder.protocol.answers"].function_status
    _stand_in_for_selfcheck()
    submission, counter = config["submission"], {}
    sys.path[:0] = config.get("paths", [])
    stub = NEUTRAL["reference_stub"](config.get("stage"), counter)
    finder = install_course(config["course"], {"__reference_called__": stub})
    if config.get("grading_reference"):
        from course.registry import GRADED_FUNCTIONS, HOME_MODULES  # as the grader sent it

        functions = {name: getattr(importlib.import_module(HOME_MODULES[name]), name)
                     for name in GRADED_FUNCTIONS}
        statuses = {name: "ok" for name in GRADED_FUNCTIONS}
        return submission_state(functions, statuses, config["device"], counter), [], {}, []
    from course.registry import GRADED_FUNCTIONS
    from course.submissions.implementations import stand_in_for_stubs  # bound before it runs

    written = {name for name in GRADED_FUNCTIONS if _written(submission, name)}  # its text
    provenance, compiled, errors = _compile_submission(submission, finder.codes)
    allow_unread = bool(config.get("allow_unread"))  # --allow-reference
    unread_of = seals["autograder.untrusted.provenance"].judge(provenance)  # sealed
    # all the loader uses of `provenance` once the submission runs, bound now: no attribute of it
    # is looked up afterwards (a property set on its class would be handed the object)
    loader = types.SimpleNamespace(compile_read=provenance.compile_read, helpers=provenance.helpers,
                                   capture=provenance.capture, captured=provenance.captured,
                                   namespaces=provenance.namespaces, origins=provenance.origins,
                                   given_calls=provenance.given_calls)
    _refuse_signal_handlers()
    if GIVEN_HEAD in finder.codes:  # run before the submission: its functions' defaults bound
        importlib.import_module(GIVEN_HEAD)
    provenance.arm(tuple(config.get("paths", [])), refuse_text=not allow_unread,
                   given=finder.codes.get(GIVEN_HEAD))
    _hide_grader()  # from here on the submission's code runs
    namespaces = _run_submission(submission, compiled, loader, errors, config)
    functions, statuses, unread = _judge(submission, namespaces,
                                         None if allow_unread else unread_of, function_status)
    recheck = _rechecking(functions, None if allow_unread else unread_of)  # what was judged
    # a stage whose reference is a stub here (the stage under test and later ones, or one a
    # student edition has not revealed) runs on the submission's own version, where it has one
    # (not its unwritten release stub: then the stub's own message names the notebook to write)
    stand_in_for_stubs({n: f for n, f in functions.items()
                        if statuses[n] == "ok" and n in written}, namespaces)
    state = submission_state(functions, statuses, config["device"], counter, recheck=recheck,
                             given_head_calls=loader.given_calls)
    served = [m for f in sys.meta_path if isinstance(f, CodeFinder) and f.top_level
              for m in f.served]
    for name in loader.helpers:
        if name[:-3] in served:
            loader.capture(f"the helper module {name}, served", submission["files"][name])
    return state, errors, unread, loader.captured


def _compile_submission(submission: dict, course: dict):
    """Before any of it runs: (provenance, [(label, code or None)], errors): every text of the
    submission compiled as read code; a .py's helpers compiled and its finder in place."""
    from autograder.protocol.helpers import servable  # parses with the course just installed
    from autograder.untrusted.provenance import Provenance

    kind, target, errors = submission["kind"], submission["target"], []
    helpers = servable(submission["files"], os.path.basename(target)) if kind == "py" else {}
    provenance = Provenance(course, helpers)
    if kind == "py":  # its helpers are found where its folder would be: before the disk's modules
        place = next((i for i, f in enumerate(sys.meta_path)
                      if f is importlib.machinery.PathFinder),
                     len(sys.meta_path))
        codes = {name[:-3]: code for name, code in provenance.helpers.items()}
        sys.meta_path.insert(place, CodeFinder(codes, frozenset(), True, "", {}))
    texts = [(target, submission["files"][os.path.basename(target)])] if kind == "py" else \
        [(label, source) for unit in submission.get("units", []) for label, source
         in unit["statements"]]
    compiled = []
    for label, source in texts:
        try:
            compiled.append((label, provenance.compile_read(source, label)))
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            errors.append(f"{os.path.basename(label) if kind == 'py' else label}: "
                          f"{type(exc).__name__}: {exc}")
            compiled.append((label, None))
    return provenance, compiled, errors


def _run_submission(submission: dict, compiled: list, loader, errors: list,
                    config: dict) -> list[dict]:
    """Run what was compiled (armed: the hook refuses code the grader did not read); the
    submission's module dicts, one per unit (a .py, an importable module: one). `loader`: what
    of the provenance the loader uses, bound before the submission runs (`load`)."""
    kind, target = submission["kind"], submission["target"]
    if kind == "module":
        namespaces = []
        try:
            namespaces.append(vars(importlib.import_module(target)))
        except BaseException as exc:
            errors.append(f"import {target}: {type(exc).__name__}: {exc}")
        _read_modules(loader, config.get("paths", []))
    else:
        units = [{"name": "submission", "file": target, "count": 1}] if kind == "py" else \
            [{"name": f"submission_{u['name'].split('.')[0]}", "file": u["name"],
              "count": len(u["statements"])} for u in submission["units"]]
        namespaces, codes = [], iter(compiled)
        for unit in units:
            module = types.ModuleType(unit["name"])
            module.__file__ = unit["file"]
            sys.modules[module.__name__] = module
            loader.namespaces.append(vars(module))
            for _ in range(unit["count"]):
                label, code = next(codes)
                try:
                    if code is not None:
                        exec(code, module.__dict__)
                except BaseException as exc:  # SystemExit and KeyboardInterrupt included
                    shown = os.path.basename(label) if kind == "py" else label
                    errors.append(f"{shown}: {type(exc).__name__}: {exc}")
            namespaces.append(vars(module))
    loader.namespaces += [vars(m) for m in list(sys.modules.values())
                              if getattr(m, "__file__", None) in loader.origins]
    return namespaces


def _judge(submission: dict, namespaces: list[dict], unread_of,
           function_status) -> tuple[dict, dict, dict]:
    """(functions, statuses, unread) of each graded function: "unread" where its code, or code
    of the submission it reaches, is not code the grader read (`unread_of`: None, judge none);
    `function_status` is bound before the grader's modules leave `sys.modules`."""
    from course.registry import GRADED_FUNCTIONS  # as the grader sent it

    functions, statuses, unread = {}, {}, {}
    for name in GRADED_FUNCTIONS:
        if submission["kind"] == "units":
            index = submission["providers"].get(name)
            function = namespaces[index].get(name) if index is not None else None
        else:
            function = namespaces[0].get(name) if namespaces else None
        functions[name] = function
        statuses[name] = function_status(
            function, function is not None and getattr(function, "__grader_stub__", None) == name)
        why = unread_of(function) if statuses[name] == "ok" and unread_of else None
        if why:
            statuses[name], unread[name] = "unread", why
    return functions, statuses, unread


def _rechecking(functions: dict, unread_of):
    """recheck(name): why graded `name` is not, right before a call, the function judged at load
    (another object, its `__code__` another, or code it reaches made since); None when it still
    is."""
    functions = dict(functions)
    judged = {name: getattr(f, "__code__", None) for name, f in functions.items()}

    def recheck(name: str) -> str | None:
        function = functions[name]
        if getattr(function, "__code__", None) is not judged[name]:
            return f"the code of {name} changed after the grader read it"
        return unread_of(function) if unread_of else None

    return recheck


def _refuse_signal_handlers() -> None:
    """A handler the submission installed would be handed the frame a signal interrupts (the
    grader's own, perhaps): `signal.signal` refuses, and where the sandbox's seccomp is loaded
    a filter refuses setting any handler (a fresh `_signal` module cannot get round it)."""
    import _signal
    import signal

    refused = NEUTRAL["refusal"]("signal handlers are refused while grading: a handler is "
                                 "handed the frame the signal interrupts, the grader's own")
    signal.signal = _signal.signal = refused
    seccomp = sys.modules.get("pyseccomp")
    if seccomp is not None:
        import errno

        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "rt_sigaction", seccomp.Arg(1, seccomp.NE, 0))
        rules.load()


def _read_modules(loader, paths: list[str]) -> None:
    """An importable module's files (under `paths`, which the sandbox shows): read as text here,
    so its code objects are the ones the grader's copy rule reads on its side."""
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and any(file.startswith(p + os.sep) for p in paths):
            with contextlib.suppress(OSError, SyntaxError, ValueError, RecursionError):
                with open(file, encoding="utf-8") as handle:
                    loader.compile_read(handle.read(), file)


def _written(submission: dict, name: str) -> bool:
    """False where the submission's `name` is still the release's `raise NotImplementedError()`."""
    from course.submissions.implementations import is_unwritten, last_definition

    if submission["kind"] == "units":
        source = last_definition(submission["units"], submission["providers"], name)
    elif submission["kind"] == "py":
        source = submission["files"].get(os.path.basename(submission["target"]))
    else:
        source = None
    try:
        return source is None or not is_unwritten(source, name)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True


def serve(answer_fd: int, order: dict) -> None:
    """A child's life: read its configuration, fork its data-parallel ranks where its order asks
    for them (`autograder.untrusted.ranks`), load the submission, answer probes until EOF."""
    seals = sealed()  # before any of the submission's code: what the loop below calls
    probes, answers = seals["autograder.untrusted.probes"], seals["autograder.protocol.answers"]
    handle, to_plain, answer_for = probes.handle, probes.to_plain, _answer_for
    error_answer, exception_answer = answers.error_answer, answers.exception_answer
    receive, send = _channel(seals["autograder.protocol.wire"])
    config = receive()
    spawned = _spawn_ranks(order, config, answer_fd, seals) if order.get("ranks") else None
    state, errors, unread, captured = load(config, seals)
    state.ranks = spawned
    send(answer_fd, {"status": "ready", "statuses": dict(state.statuses), "errors": errors,
                     "unread": unread, "captured": [list(pair) for pair in captured],
                     "judged": _judged(state)})
    while True:
        request = receive()
        if request is None:
            break
        try:
            response = handle(state, request)
        except BaseException as exc:  # a probe must answer, whatever the submission did
            response = answer_for(exc, exception_answer, error_answer)
        send(answer_fd, to_plain(response))


def _judged(state) -> dict:
    """{graded function: [file name, first line]} of the code judged for it where that is a
    plain function: the definition the class report fingerprints (`instructor.classmates`),
    whatever name bound it."""
    return {name: [function.__code__.co_filename, function.__code__.co_firstlineno]
            for name, function in state.functions.items()
            if state.statuses.get(name) == "ok" and type(function) is types.FunctionType}


def _answer_for(exc: BaseException, exception_answer, error_answer) -> dict:
    """The error answer for what a call raised; its type's name alone where describing it
    raises too (a refusal met while its traceback is formatted, a hostile `__str__`)."""
    try:
        return exception_answer(exc)
    except BaseException:
        return error_answer(type(exc).__name__, "")


def _spawn_ranks(order: dict, config: dict, answer_fd: int, seals: dict) -> list:
    """Before any student code: fork the ranks (each loads the submission once gloo has
    connected and its network is closed), then close this child's network too. `seals`: the
    sealed modules (`sealed`) each rank serves with."""
    from autograder.untrusted import confine

    probes, ranks = seals["autograder.untrusted.probes"], seals["autograder.untrusted.ranks"]
    ddp_train_step, serve_requests = probes.ddp_train_step, ranks.serve_requests

    def serve_rank(rank: int, request_fd: int, rank_answer_fd: int) -> None:
        os.close(answer_fd)
        state = load(config, seals)[0]
        serve_requests(request_fd, rank_answer_fd,
                       lambda request, shard: ddp_train_step(state, request, shard))

    spawned = ranks.spawn(order["ranks"], order["folder"], serve_rank)
    confine.close_network()
    return spawned


# ---- the template ------------------------------------------------------------------------
def _become_child(control: socket.socket, fds: list, order: dict, setup: dict) -> None:
    """In the forked child, before any student code: own descriptors, limits, user id, then the
    tier's confinement (tier 2: Landlock and seccomp; tier 1: seccomp inside bubblewrap)."""
    control.close()
    request_fd, answer_fd, log_fd = fds
    os.dup2(request_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    for fd in (request_fd, log_fd):
        os.close(fd)
    os.setpgid(0, 0)
    template = os.getppid()
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("1000")  # the OOM killer takes a child, not the template
    for name, value in setup["limits"].items():
        if name == "RLIMIT_AS":  # what the submission may add to what the template has mapped
            value += _mapped_bytes()
        resource.setrlimit(getattr(resource, name), (value, value))
    if order.get("uid"):
        os.setgroups([])
        os.setgid(order["uid"])
        os.setuid(order["uid"])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setuid, which clears it
    if os.getppid() != template:
        os._exit(1)  # the template died before the death signal was set
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    sys.dont_write_bytecode = True
    os.umask(0o077)
    from autograder.untrusted import confine

    landlock = setup.get("landlock")
    if landlock is not None:  # tier 2: its own folder is its home, its tmp and all it may write
        os.chdir(order["folder"])
        os.environ.update(HOME=order["folder"], TMPDIR=order["folder"])
        tempfile.tempdir = None
        confine.confine(landlock["read_only"], order["folder"], tcp=bool(order.get("ranks")))
    elif setup.get("wipe"):  # tier 1: the network namespace holds only loopback, for gloo
        confine.install_seccomp(sockets=True)


def _wipe(uid: int, folders: list) -> str | None:
    """Delete what user `uid` left in `folders` (tier 1's shared /tmp, /dev/shm and home), as that
    user (the template may not delete others' files in a sticky /tmp): its own files only; why
    not, where something of its own stayed."""
    from autograder.protocol import cleanup

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            if uid:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            why = "; ".join(filter(None, (cleanup.empty(folder) for folder in folders)))
            os.write(write, why.encode()[:4000])
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        why = answer.read().decode("utf-8", "replace")
    os.waitpid(pid, 0)
    return why or None


def _mapped_bytes() -> int:
    """This process's address space (VmSize), 0 where /proc cannot tell."""
    try:
        with open("/proc/self/status", "rb") as handle:
            line = next(line for line in handle if line.startswith(b"VmSize:"))
        return int(line.split()[1]) * 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return 0


def _processes_of(uid: int, pgid: int) -> list[int]:
    """Live processes of the child's user (each child has its own) or, without one, its group."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as handle:
                fields = dict(line.split(b":", 1) for line in handle if b":" in line)
            if fields[b"State"].split()[0] == b"Z":
                continue  # already dead, waiting for its parent
            if uid and int(fields[b"Uid"].split()[0]) == uid:
                found.append(int(entry))
            elif not uid and os.getpgid(int(entry)) == pgid:
                found.append(int(entry))
        except (OSError, KeyError, IndexError, ValueError):
            continue
    return found


def _reap(pid: int, uid: int, grace: float, setup: dict, folder: str | None) -> dict:
    """Wait up to `grace` s for the child to end; then kill it and everything of its user, and
    delete all it could write, before the next child runs."""
    deadline, status = time.monotonic() + grace, None
    while status is None:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = code
        elif time.monotonic() >= deadline:
            break
        else:
            time.sleep(0.02)
    killed = status is None
    for _ in range(500):  # a fork bomb forks while we kill: repeat until nothing is left
        found = _processes_of(uid, pid) + ([pid] if status is None else [])
        if not found:
            break
        for target in found:
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                continue
        if status is None:
            status = os.waitpid(pid, 0)[1]
        time.sleep(0.005)
    _collect_orphans()
    from autograder.protocol import cleanup

    left = cleanup.remove(folder) if folder else None  # iterative: a 3,000-deep chain is fine
    if setup.get("wipe"):
        left = _wipe(uid, setup["wipe"]) or left
    ended = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) \
        else {"exit": os.waitstatus_to_exitcode(status)}
    return {**ended, "killed_by_grader": killed, **({"cleanup": left} if left else {})}


def _collect_orphans() -> None:
    """Wait for the dead processes its children left (the template is their subreaper: a
    child's data-parallel ranks, a daemon), so that none lingers as a zombie of its user."""
    while True:
        try:
            if os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG) is None:
                return
        except ChildProcessError:
            return


def _private_folder(setup: dict, uid: int) -> str | None:
    """Tier 2: a fresh folder only `uid` may use (its home and tmp), inside the grader's 0711
    one."""
    if setup.get("landlock") is None:
        return None
    from autograder.protocol import cleanup

    folder = os.path.join(setup["landlock"]["stages"], str(uid))
    cleanup.remove(folder)  # a folder that stays makes the mkdir below fail, and the fork with it
    os.mkdir(folder, 0o700)
    os.chown(folder, uid, uid)
    return folder


def template(control_fd: int, root: str) -> None:
    sys.path.insert(0, root)
    setup = _channel()[0]()  # the template's configuration, on its stdin
    import torch
    import transformers  # noqa: F401  (loaded once here, shared by every child)

    from autograder.protocol import (  # noqa: F401  (before any child)
        answers,
        cleanup,  # noqa: F401
        markers,
        wire,
    )
    from autograder.protocol.precision import use_ieee_float32
    from autograder.untrusted import confine, probes, provenance  # noqa: F401
    if setup.get("landlock") is not None or setup.get("wipe"):
        import pyseccomp  # noqa: F401  (loaded before any child confines itself)
    torch.set_num_threads(1)
    use_ieee_float32()  # every child forked from here computes float32 as the tolerances assume
    # orphans of a child are ours to reap
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    global _TEMPLATE_MODULES
    install_course(setup["course"])  # course.loop.models, course.loop.plotting and what they import
    markers.build_tokenizer()
    if setup.get("plots"):  # notebooks: what they import for their plots, once, not per stage
        importlib.import_module("course.loop.plotting")
        import matplotlib.pyplot  # noqa: F401
    _TEMPLATE_MODULES = tuple(name for name in setup["course"]
                              if name != "course" and name in sys.modules)
    if setup.get("models"):  # unless no check of this grading builds a model (`Grader.expect`)
        markers.import_model_code()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    control = socket.socket(fileno=control_fd)
    control.send(json.dumps({"ready": True}).encode())
    folders = {}  # tier 2: child pid -> its private folder
    while True:
        message, fds, _, _ = socket.recv_fds(control, 1 << 16, 4)
        if not message:
            return
        order = json.loads(message)
        if order["op"] == "fork":
            order["folder"] = _private_folder(setup, order["uid"])
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    _become_child(control, fds, order, setup)
                    serve(fds[1], order)
                except BaseException:
                    traceback.print_exc()
                    code = 1
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            for fd in fds:
                os.close(fd)
            folders[pid] = order["folder"]
            control.send(json.dumps({"pid": pid}).encode())
        elif order["op"] == "reap":
            control.send(json.dumps(_reap(order["pid"], order["uid"], order["grace"], setup,
                                          folders.pop(order["pid"], None))).encode())


if __name__ == "__main__":
    template(int(sys.argv[1]), sys.argv[2])
