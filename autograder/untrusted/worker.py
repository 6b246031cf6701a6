"""The worker: a template process in the sandbox that forks one child per stage to grade it.

`autograder.trusted.sandbox.Sandbox` starts `python -I -B worker.py CONTROL_FD ROOT` inside bubblewrap
(or, for a practice grade, as a plain subprocess). The template imports torch, transformers and,
for notebooks, matplotlib once, builds the tokenizer, and waits on CONTROL_FD (a Unix socket to
the grader) for orders:
"fork" (with the child's request pipe, answer pipe and log file passed as descriptors) and "reap"
(end a child and every process of its user, delete all it could write: tier 1's /tmp, /dev/shm
and home, as that user; tier 2's private folder; say how it ended). It runs no student code.

Each child drops to its own user id (no capabilities, no new privileges, at most NPROC processes),
takes a seccomp filter and, in tier 2, Landlock (`autograder.untrusted.confine`),
installs the `course` modules the grader sent it (the stage under test, and later stages, as stubs:
see `autograder.trusted.reference.course_sources`), loads the submission, and answers probe requests:
requests arrive on stdin (pickled by the trusted parent); responses leave on its answer pipe as
plain data in the format of `autograder.protocol.wire`, which the parent checks before it builds anything.
Whatever the student's code prints goes to a log file, never to the grader's terminal.
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
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
import types
from collections import Counter

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38


def _receive():
    """The next request (a pickle from the trusted parent), or None when the parent closed stdin."""
    from autograder.protocol import wire  # first imported here, before the submission is loaded

    try:
        return pickle.loads(wire.read_frame(0, None, cap=2**40))
    except wire.Closed:
        return None


def _send(fd: int, message: dict) -> None:
    """Answer in the wire format the parent decodes (`autograder.protocol.wire`), never a pickle."""
    from autograder.protocol import wire

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


class CourseFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `course` and `course.*` from the sources the grader sent; nothing from the disk."""

    def __init__(self, sources: dict, extra_globals: dict):
        self.sources = sources
        self.extra_globals = extra_globals

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.sources:
            return importlib.util.spec_from_loader(fullname, self, is_package=self._package(fullname))
        if fullname.startswith("course."):
            raise ModuleNotFoundError(f"No module named {fullname!r} (not available while grading)")
        return None

    def _package(self, name: str) -> bool:
        """`course` and its sub-packages (`course.loop`): the names other modules are under."""
        return name == "course" or any(other.startswith(name + ".") for other in self.sources)

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        name = module.__name__
        parts = name.split(".")[1:] + (["__init__"] if self._package(name) else [])
        module.__file__ = f"<course>/{'/'.join(parts)}.py"
        if self._package(name):
            module.__path__ = []
        module.__dict__.update(self.extra_globals)
        exec(compile(self.sources[name], module.__file__, "exec"), module.__dict__)


class HelperFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a .py submission's helpers (`import helper` of a `helper.py` beside it) from the
    text the grader sent: the sandbox shows none of the submission's folders."""

    def __init__(self, files: dict):
        self.files = {name[:-3]: (name, text) for name, text in files.items()}

    def find_spec(self, fullname, path=None, target=None):
        if path is None and fullname in self.files:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        name, text = self.files[module.__name__]
        module.__file__ = name
        exec(compile(text, name, "exec"), module.__dict__)


# The `course` modules the template imported (`autograder.trusted.reference.template_sources`: no
# graded module among them, and none stubbed in any stage): every child keeps them as built.
_TEMPLATE_MODULES: tuple[str, ...] = ()


def install_course(sources: dict, extra_globals: dict | None = None) -> None:
    """Replace whatever `course` modules are loaded by those of `sources`, but for the template's
    own (`_TEMPLATE_MODULES`), which are kept."""
    for finder in [f for f in sys.meta_path if isinstance(f, CourseFinder)]:
        sys.meta_path.remove(finder)
    sys.meta_path.insert(0, CourseFinder(sources, extra_globals or {}))
    kept = {name: sys.modules[name] for name in _TEMPLATE_MODULES if name in sys.modules}
    for name in [n for n in sys.modules if n == "course" or n.startswith("course.")]:
        del sys.modules[name]
    sys.modules.update(kept)
    importlib.import_module("course")
    for name, module in kept.items():  # each under its package: `course.loop.models` in `course.loop`
        parent, _, attribute = name.rpartition(".")
        setattr(sys.modules[parent], attribute, module)


def _stand_in_for_selfcheck() -> None:
    """Notebooks import `autograder.selfcheck` for their check cells, which a grading never runs
    (only definitions are read): here that import finds a stand-in whose `self_check` does
    nothing, in both tiers (tier 2 cannot even read the real module, which drives the grader)."""
    module = types.ModuleType("autograder.selfcheck")
    module.self_check = lambda *args, **kwargs: None
    sys.modules[module.__name__] = module


def load(config: dict):
    from autograder.protocol.answers import function_status
    from autograder.untrusted.probes import SubmissionState

    _stand_in_for_selfcheck()

    submission, errors, counter = config["submission"], [], Counter()
    stage = config.get("stage")

    def reference_called(name: str):
        counter[name] += 1
        raise RuntimeError(f"the reference course.{name} is not available while stage {stage} is "
                           "graded: write your own implementation (the references of earlier "
                           "stages are available)")

    sys.path[:0] = config.get("paths", [])
    install_course(config["course"], {"__reference_called__": reference_called})
    from course.registry import GRADED_FUNCTIONS, HOME_MODULES  # as the grader sent it
    kind, target = submission["kind"], submission["target"]
    if config.get("grading_reference"):
        functions = {name: getattr(importlib.import_module(HOME_MODULES[name]), name)
                     for name in GRADED_FUNCTIONS}
        statuses = {name: "ok" for name in GRADED_FUNCTIONS}
        return SubmissionState(functions, statuses, config["device"], counter), errors
    namespaces = []
    if kind == "module":
        try:
            namespaces.append(vars(importlib.import_module(target)))
        except BaseException as exc:
            errors.append(f"import {target}: {type(exc).__name__}: {exc}")
    elif kind == "py":
        files = submission["files"]
        # its helpers are found where its folder would be on sys.path: before the disk's modules
        place = next((i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder),
                     len(sys.meta_path))
        sys.meta_path.insert(place, HelperFinder(files))
        module = types.ModuleType("submission")
        module.__file__ = target
        sys.modules["submission"] = module
        try:
            exec(compile(files[os.path.basename(target)], target, "exec"), module.__dict__)
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
        statuses[name] = function_status(
            function, function is not None and getattr(function, "__grader_stub__", None) == name)
    # a stage whose reference is a stub here (the stage under test and later ones, or one a
    # student edition has not revealed) runs on the submission's own version, where it has one
    # (not its unwritten release stub: then the stub's own message names the notebook to write)
    from course.submissions.implementations import stand_in_for_stubs
    stand_in_for_stubs({n: f for n, f in functions.items()
                        if statuses[n] == "ok" and _written(submission, n)}, namespaces)
    return SubmissionState(functions, statuses, config["device"], counter), errors


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
    from autograder.protocol.answers import exception_answer
    from autograder.untrusted.probes import handle, to_plain

    config = _receive()
    spawned = _spawn_ranks(order, config, answer_fd) if order.get("ranks") else None
    state, errors = load(config)
    state.ranks = spawned
    _send(answer_fd, {"status": "ready", "statuses": dict(state.statuses), "errors": errors})
    while True:
        request = _receive()
        if request is None:
            break
        try:
            response = handle(state, request)
        except BaseException as exc:  # a probe must answer, whatever the submission did
            response = exception_answer(exc)
        _send(answer_fd, to_plain(response))


def _spawn_ranks(order: dict, config: dict, answer_fd: int) -> list:
    """Before any student code: fork the ranks (each loads the submission once gloo has
    connected and its network is closed), then close this child's network too."""
    from autograder.untrusted import confine, ranks
    from autograder.untrusted.probes import ddp_train_step

    def serve_rank(rank: int, request_fd: int, rank_answer_fd: int) -> None:
        os.close(answer_fd)
        state, _ = load(config)
        ranks.serve_requests(request_fd, rank_answer_fd,
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
        confine.install_seccomp(unix_only=False)


def _wipe(uid: int, folders: list) -> None:
    """Delete what user `uid` left in `folders` (tier 1's shared /tmp, /dev/shm and home), as that
    user (the template may not delete others' files in a sticky /tmp): its own files only."""
    pid = os.fork()
    if pid == 0:
        try:
            if uid:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            for folder in folders:
                _empty(folder)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _empty(folder: str) -> None:
    for entry in os.scandir(folder):
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)  # a folder made unreadable by its owner is emptied too
                _empty(entry.path)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue


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
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
    if setup.get("wipe"):
        _wipe(uid, setup["wipe"])
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status), "killed_by_grader": killed}
    return {"exit": os.waitstatus_to_exitcode(status), "killed_by_grader": killed}


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
    """Tier 2: a fresh folder only `uid` may use (its home and tmp), inside the grader's 0711 one."""
    if setup.get("landlock") is None:
        return None
    folder = os.path.join(setup["landlock"]["stages"], str(uid))
    shutil.rmtree(folder, ignore_errors=True)
    os.mkdir(folder, 0o700)
    os.chown(folder, uid, uid)
    return folder


def template(control_fd: int, root: str) -> None:
    sys.path.insert(0, root)
    setup = _receive()  # the template's configuration, on its stdin
    import torch
    import transformers  # noqa: F401  (loaded once here, shared by every child)

    from autograder.protocol import answers, markers, wire  # noqa: F401  (before any child)
    from autograder.untrusted import confine, probes  # noqa: F401
    if setup.get("landlock") is not None or setup.get("wipe"):
        import pyseccomp  # noqa: F401  (loaded before any child confines itself)
    torch.set_num_threads(1)
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of a child are ours to reap
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
