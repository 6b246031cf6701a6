"""Provenance: the grader grades only code it read, sees code made at run time where it is made,
and keeps its own measurements out of the submission's reach (`autograder.untrusted.provenance`,
the stage child's loader in `autograder.untrusted.worker`); helpers are served only where the
submission's imports name them (`autograder.protocol.helpers`).

The stage child's audit hook cannot be removed and its loader takes the grader's modules out of
`sys.modules`, so each load here runs in a fresh process (`_load`), the way a stage child does,
without the sandbox; the sandboxed gradings of the attacks are tests/redteam/ (test_redteam.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autograder.api import grade
from autograder.protocol.helpers import is_library, servable
from autograder.protocol.wire import decode
from autograder.trusted.grader import _sources
from autograder.trusted.isolation import sandbox_problem
from course.submissions.reader import load_submission

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "autograder_cases"
REDTEAM = ROOT / "tests" / "redteam"

# a stage child's load and one probe call of compute_entropy, in a process of its own, answered
# as `worker.serve` answers (the sealed probes and wire, bound before the submission loads; the
# answer written to a pipe); prints {"statuses", "unread", "errors", "captured", "answer" (the
# frame's payload, hex: `_load` decodes it as the trusted side does, in its own process),
# "report", "probes"} ("report": the submission's REPORT global, plain data it gathered about
# what it could reach; "probes": the id of the probes module the grader imported)
DRIVER = """
import json, os, sys
from pathlib import Path
import torch
import autograder.untrusted.worker as worker
from autograder.untrusted import probes
from autograder.trusted.reference import course_sources
from course.registry import STAGE_OF
from course.submissions.reader import load_submission
submission = load_submission(sys.argv[1], Path(sys.argv[1]).parent)
stage = STAGE_OF["compute_entropy"]
config = {"submission": submission.to_request(), "device": "cpu", "stage": stage, "paths": [],
          "grading_reference": False, "course": course_sources(stage)}
seals = worker.sealed()
sealed = seals["autograder.untrusted.probes"]
handle, to_plain, send = sealed.handle, sealed.to_plain, worker._channel(
    seals["autograder.protocol.wire"])[1]
dumps, read, answer, written = json.dumps, os.read, *os.pipe()
state, errors, unread, captured = worker.load(config, seals)
call = handle(state, {"kind": "call", "function": "compute_entropy", "count_given_head": True,
                      "count_saved_bytes": True, "kwargs": {"logits": torch.zeros(2, 3)}})
send(written, to_plain(call))
frame = read(answer, 1 << 16)
report = vars(sys.modules["submission"]).get("REPORT")
print(dumps({"statuses": {"compute_entropy": state.statuses["compute_entropy"]},
             "unread": unread, "errors": errors, "captured": captured, "report": report,
             "answer": frame[8:].hex(), "probes": id(probes)}))
"""

HONEST_ENTROPY = '''
def compute_entropy(logits):
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)
'''


def _load(tmp_path: Path, text: str, **helpers: str) -> dict:
    folder = tmp_path / "work"
    folder.mkdir(exist_ok=True)
    (folder / "submission.py").write_text(text)
    for name, helper in helpers.items():
        (folder / f"{name}.py").write_text(helper)
    done = subprocess.run([sys.executable, "-c", DRIVER, str(folder / "submission.py")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    call = decode(bytes.fromhex(loaded.pop("answer")))
    loaded["call"] = {k: v for k, v in call.items() if type(v) in (str, bool, dict, int, list)}
    loaded["tensor"] = type(call.get("output")) is torch.Tensor
    return loaded


# ---- helpers ---------------------------------------------------------------------------------
def test_helpers_are_the_files_the_imports_name_and_never_a_library_module():
    files = {"main.py": "import helper\nimport stringprep\nfrom colorsys import hls_to_rgb\n"
                        "import torch\n",
             "helper.py": "from deeper import f\n", "deeper.py": "def f(): pass\n",
             "unnamed.py": "X = 1\n", "stringprep.py": "X = 1\n", "colorsys.py": "X = 1\n",
             "torch.py": "X = 1\n"}
    assert list(servable(files, "main.py")) == ["helper.py", "deeper.py"]
    assert is_library("stringprep") and is_library("colorsys") and is_library("torch")
    assert is_library("course") and not is_library("helper")


def test_the_copy_rule_reads_exactly_the_helpers_that_can_be_served():
    idna = load_submission(str(REDTEAM / "helper_idna_stringprep" / "submission.py"), ROOT)
    assert "stringprep.py" in idna.files and len(_sources(idna)) == 1  # never served, not read
    honest = load_submission(str(CASES / "alt_full.py"), ROOT)
    assert len(_sources(honest)) == 2 and "def build" in _sources(honest)[1]  # _impl.py


# ---- what the grader calls was read ----------------------------------------------------------
def test_honest_code_with_gc_inspect_dataclasses_and_logging_is_read(tmp_path):
    loaded = _load(tmp_path, "import gc\nimport inspect\nimport logging\nimport torch\n"
                             "from collections import namedtuple\nfrom dataclasses import dataclass\n"
                             "from helper import scale\n"
                             "Pair = namedtuple('Pair', 'a b')\n\n\n@dataclass\nclass Box:\n"
                             "    x: object\n\n\nlogging.getLogger('x').warning('loading')\n"
                             "gc.collect()\nSIGNATURE = str(inspect.signature(scale))\n"
                             + HONEST_ENTROPY.replace("return -(", "return scale(Box(Pair(1, -(")
                             .replace(".sum(dim=-1)", ".sum(dim=-1)).b).x)"),
                   helper="def scale(x):\n    return x\n")
    assert loaded["statuses"] == {"compute_entropy": "ok"} and loaded["unread"] == {}
    assert loaded["errors"] == [] and loaded["call"]["status"] == "ok", loaded
    # the helper it served, and the text namedtuple wrote for it: evidence
    generated = [text for origin, text in loaded["captured"] if not origin.startswith("the helper")]
    assert [origin for origin, _ in loaded["captured"]].count(
        "the helper module helper.py, served") == 1, loaded["captured"]
    assert generated and all("_tuple_new" in text or "__create_fn__" in text
                             for text in generated), generated


HEX = HONEST_ENTROPY.encode().hex()


@pytest.mark.parametrize("attack", [
    # builtins' exec reached through a bound method: no name any deny list holds
    f"import torch\ngetattr(print.__self__, 'exec')(bytes.fromhex('{HEX}').decode())\n",
    # compiled under the submission's own file name, its def on the line of a real one
    "import torch\n\n\ndef compute_entropy(logits):\n    return logits\n\n\n"
    f"exec(compile('\\n' * 3 + bytes.fromhex('{HEX}').decode(), __file__, 'exec'))\n",
    # a function the submission wrote, calling one made at run time and kept in a dict
    f"import torch\n_NS = {{'torch': torch}}\nexec(bytes.fromhex('{HEX}').decode(), _NS)\n\n\n"
    "def compute_entropy(logits):\n    return _NS['compute_entropy'](logits)\n",
    # ... or in a closure
    f"import torch\n\n\ndef _make():\n    ns = {{'torch': torch}}\n"
    f"    exec(bytes.fromhex('{HEX}').decode(), ns)\n    inner = ns['compute_entropy']\n\n"
    "    def compute_entropy(logits):\n        return inner(logits)\n    return compute_entropy\n\n\n"
    "compute_entropy = _make()\n",
], ids=["print.__self__ exec", "forged file and line", "kept in a dict", "kept in a closure"])
def test_text_compiled_at_run_time_is_refused_and_kept_as_evidence(tmp_path, attack):
    loaded = _load(tmp_path, attack)
    assert any("compile() of text that is not your submission's" in e
               for e in loaded["errors"]), loaded["errors"]
    assert "unread" not in loaded["statuses"].values()  # the text never ran: nothing to judge
    assert any("log_softmax" in text and "submission.py line" in origin
               for origin, text in loaded["captured"]), loaded["captured"]


def test_code_made_while_a_graded_function_runs_is_refused(tmp_path):
    loaded = _load(tmp_path, "import torch\n\n\ndef compute_entropy(logits):\n"
                             f"    ns = {{'torch': torch}}\n    run = getattr(print.__self__, 'ex' + 'ec')\n"
                             f"    run(bytes.fromhex('{HEX}').decode(), ns)\n"
                             "    return ns['compute_entropy'](logits)\n")
    assert loaded["statuses"] == {"compute_entropy": "ok"}  # what it runs is seen when it runs
    assert loaded["call"]["status"] == "error", loaded["call"]
    assert "compile() of text that is not your submission's" in loaded["call"]["message"]


# ---- the grader's objects are out of reach ---------------------------------------------------
def test_no_alias_of_sys_or_main_reaches_the_grader(tmp_path):
    loaded = _load(tmp_path, "import sys as _s\nfrom sys import modules\nimport __main__\n"
                             "import torch\n"
                             "REPORT = {'alias': [n for n in _s.modules if n.startswith('autograder.')],\n"
                             "          'from': 'autograder.untrusted.probes' in modules,\n"
                             "          'main': sorted(n for n in vars(__main__) if not n.startswith('__'))}\n"
                             "try:\n    import autograder.untrusted.probes as fresh\n"
                             "    REPORT['import'] = id(fresh)\nexcept ImportError as error:\n"
                             "    REPORT['import'] = str(error)\n" + HONEST_ENTROPY)
    imported = loaded["report"].pop("import")
    assert loaded["report"] == {"alias": ["autograder.selfcheck"], "from": False, "main": []}
    # where the grader's files can be read, an import makes a fresh copy, not the one answering
    assert imported != loaded["probes"], loaded
    assert loaded["call"]["status"] == "ok"


@pytest.mark.parametrize("reach", ["sys._getframe(1)", "inspect.currentframe()",
                                   "inspect.stack()", "list(traceback.walk_stack(None))",
                                   "gc.get_referrers(logits)", "gc.get_objects()",
                                   "sys._current_frames()"])
def test_frames_and_object_walks_are_refused_to_graded_code(tmp_path, reach):
    loaded = _load(tmp_path, "import gc\nimport inspect\nimport sys\nimport traceback\n"
                             "import torch\n\n\ndef compute_entropy(logits):\n"
                             f"    found = {reach}\n    return logits.sum(-1)\n")
    assert loaded["call"]["status"] == "error", loaded["call"]
    assert "refused while grading" in loaded["call"]["message"]


def test_what_the_library_does_with_frames_still_works(tmp_path):
    loaded = _load(tmp_path, "import logging\nimport traceback\nimport typing\nimport torch\n\n\n"
                             "def compute_entropy(logits):\n"
                             "    logging.getLogger('x').warning('a warning finds its caller')\n"
                             "    try:\n        raise ValueError('x')\n    except ValueError:\n"
                             "        text = traceback.format_exc()\n"
                             "    T = typing.TypeVar('T')\n"
                             "    return logits.sum(-1) * (len(text) > 0)\n")
    assert loaded["call"]["status"] == "ok", loaded["call"]


def test_a_library_imported_first_in_a_graded_call_may_write_its_code_and_walk_its_frames(
        tmp_path):
    """mpmath writes methods from text as its module body runs, and sympy's dispatch walks its
    own frames: both first imported from a graded call (transformers' lazy names import them)."""
    loaded = _load(tmp_path, "import torch\n\n\ndef compute_entropy(logits):\n"
                             "    import mpmath\n"
                             "    import sympy.multipledispatch\n"
                             "    return logits.sum(-1) * (mpmath.mpf(1) == 1)\n")
    assert loaded["call"]["status"] == "ok", loaded["call"]


def test_a_trampoline_in_the_submissions_own_module_body_is_still_refused(tmp_path):
    """The import allowance covers library frames all the way down to the import machinery: a
    helper of the submission's that walks frames through the library as it is imported is not."""
    loaded = _load(tmp_path, "import torch\n\n\ndef compute_entropy(logits):\n"
                             "    import stolen_frames\n    return logits.sum(-1)\n",
                   stolen_frames="import traceback\n\nFRAMES = list(traceback.walk_stack(None))\n")
    assert loaded["call"]["status"] == "error", loaded["call"]
    assert "refused while grading" in loaded["call"]["message"]


# ---- sandboxed: honest work keeps its marks ---------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("tier", ["bubblewrap", "landlock"])
def test_an_honest_submission_importing_gc_and_inspect_keeps_full_marks(tmp_path, tier):
    if sandbox_problem(ROOT, tier):
        pytest.skip(f"no {tier} sandbox here: {sandbox_problem(ROOT, tier)}")
    shutil.copy(CASES / "_impl.py", tmp_path / "_impl.py")
    (tmp_path / "honest.py").write_text("import gc\nimport inspect\n"
                                        + (CASES / "alt_full.py").read_text())
    graded = grade(str(tmp_path / "honest.py"), official=True, isolation=tier,
                   probe_timeout=8.0)
    failed = {n: r["output"][:300] for n, r in graded["results"].items() if r["status"] != "passed"}
    assert graded["score"] == graded["max_score"] == 66, failed


def test_rebinding_builtins_or_torch_changes_no_measurement(tmp_path):
    """The probes keep their own builtins and torch's descriptors, bound before the submission
    loads: a submission that rebinds `isinstance` in `builtins` (so no output looks like a
    tensor) or torch's subclass switch changes only its own code."""
    loaded = _load(tmp_path, "import builtins\nimport torch\n_real = builtins.isinstance\n"
                             "builtins.isinstance = lambda x, t: False if t is torch.Tensor "
                             "else _real(x, t)\n"
                             "torch._C.DisableTorchFunctionSubclass = None\n"
                             + HONEST_ENTROPY.replace("return -(", "return (lambda: 0) and -("))
    assert loaded["call"]["status"] == "ok" and loaded["tensor"], loaded
    assert loaded["call"]["requires_grad"] == {"": False}


def test_a_tracer_is_refused_to_the_submission(tmp_path):
    loaded = _load(tmp_path, "import sys\nimport torch\n\n\ndef compute_entropy(logits):\n"
                             "    sys.settrace(lambda frame, event, arg: None)\n"
                             "    return logits.sum(-1)\n")
    assert loaded["call"]["status"] == "error"
    assert "sys.settrace is refused while grading" in loaded["call"]["message"]


def test_code_hidden_in_a_module_made_at_run_time_or_behind_a_large_dict_is_found(tmp_path):
    """Refused where it is made; and a graded function whose reach is padded past what the
    loader follows is not graded."""
    loaded = _load(tmp_path, "import types\nimport torch\n"
                             "fake = types.ModuleType('torch_helpers')\nfake.torch = torch\n"
                             "try:\n"
                             f"    exec(bytes.fromhex('{HEX}').decode(), vars(fake))\n"
                             "except RuntimeError as refused:\n    REPORT = str(refused)\n"
                             "PAD = {i: [] for i in range(30_000)}\n\n\n"
                             "def compute_entropy(logits):\n"
                             "    return fake.compute_entropy(logits) if PAD else None\n")
    assert "compile() of text" in loaded["report"], loaded
    assert loaded["statuses"] == {"compute_entropy": "unread"}, loaded
    assert "too large to follow" in loaded["unread"]["compute_entropy"]


def test_a_course_module_in_a_sub_package_is_known_by_the_file_the_worker_compiles_it_under():
    """The worker compiles `course.loop.tasks` as `<course>/loop/tasks.py`; provenance must know
    that name as course code, or the reward function a check hands the submission is "unread"."""
    from autograder.untrusted.provenance import course_file

    modules = {"course": "", "course.loop": "", "course.loop.tasks": "", "course.scoring": ""}
    assert course_file("course", modules) == "<course>/__init__.py"
    assert course_file("course.loop", modules) == "<course>/loop/__init__.py"
    assert course_file("course.loop.tasks", modules) == "<course>/loop/tasks.py"
    assert course_file("course.scoring", modules) == "<course>/scoring.py"
    assert course_file("course.loop.tasks", modules) != "<course>/loop.tasks.py"  # the old bug


# ---- refused, not counted: each way to make or reach code the grader did not read -------------
@pytest.mark.parametrize("reach, says", [
    ("signal.signal(signal.SIGUSR1, lambda signum, frame: None)", "signal handlers are refused"),
    ("ctypes.pythonapi.PyThreadState_Get()", "ctypes is refused"),
    ("_Depth().frame", "frames are refused"),  # functools calls sys._getframe for it
    ("_xxsubinterpreters.create()", "interpreter creation failed"),  # our refusal, C's words
    ("_other.__code__.replace(co_name='x')", "building or replacing a code object"),
    ("marshal.loads(marshal.dumps(_other.__code__))", "building or replacing a code object"),
    ("setattr(compute_entropy, '__code__', _other.__code__)", "building or replacing a code"),
], ids=["signal handler", "ctypes", "cached_property(sys._getframe)", "sub-interpreter",
        "code.replace", "marshal", "__code__ swap"])
def test_what_would_make_or_reach_unread_code_is_refused_and_says_what(tmp_path, reach, says):
    loaded = _load(tmp_path, "import ctypes\nimport functools\nimport marshal\nimport signal\n"
                             "import sys\nimport _xxsubinterpreters\nimport torch\n\n\n"
                             "class _Depth:\n    frame = functools.cached_property(sys._getframe)\n\n"
                             "    def __index__(self):\n        return 1\n\n\n"
                             "def _other(logits):\n    return logits\n\n\n"
                             f"def compute_entropy(logits):\n    {reach}\n"
                             "    return logits.sum(-1)\n")
    assert loaded["statuses"] == {"compute_entropy": "ok"}, loaded
    assert loaded["call"]["status"] == "error", loaded["call"]
    assert says in loaded["call"]["message"], loaded["call"]


def test_what_the_submission_reaches_of_the_loader_leads_nowhere_in_the_grader(tmp_path):
    """The finders on sys.meta_path, the stubs' `__reference_called__`: their `__globals__`
    hold no module of the grader's, and the course finder keeps code, not text."""
    loaded = _load(tmp_path, "import sys\nimport torch\nimport course.scoring\n"
                             "_reached = [v for f in sys.meta_path for v in "
                             "list(vars(type(f)).values()) + list(vars(f).values())]\n"
                             "_reached.append(course.scoring.__dict__.get('__reference_called__'))\n"
                             "REPORT = {'globals': sorted({str(g.get('__name__')) for g in "
                             "(getattr(v, '__globals__', None) for v in _reached) if g}),\n"
                             "          'text': [type(v).__name__ for f in sys.meta_path "
                             "if hasattr(f, '__dict__') for d in vars(f).values() "
                             "if isinstance(d, dict) for v in d.values() if isinstance(v, str)]}\n"
                             + HONEST_ENTROPY)
    assert loaded["report"]["globals"] and not any(
        name.startswith(("autograder", "__main__")) for name in loaded["report"]["globals"]), \
        loaded["report"]
    assert loaded["report"]["text"] == [], loaded["report"]
    assert loaded["call"]["status"] == "ok"


def test_unread_code_behind_a_library_wrapper_is_found():
    """`lru_cache` and torch's decorators hold the function they wrap where no attribute tells
    truly (`__wrapped__` can be rebound): the loader looks at what they hold."""
    import functools

    from autograder.untrusted.provenance import Provenance

    provenance = Provenance({}, {})
    honest = {}
    exec(provenance.compile_read("def f(x):\n    return x\n", "submission.py"), honest)
    made = {"torch": torch}
    exec(HONEST_ENTROPY, made)  # compiled here, not by the loader: not read
    cached = functools.lru_cache(maxsize=0)(made["compute_entropy"])
    cached.__wrapped__ = honest["f"]  # says the read one
    for wrapped in (cached, torch.enable_grad()(made["compute_entropy"]),
                    functools.lru_cache(maxsize=0)(torch.no_grad()(made["compute_entropy"]))):
        assert "not compiled from the submission's text" in provenance.unread(wrapped)
    assert provenance.unread(functools.lru_cache(maxsize=0)(honest["f"])) is None
    assert provenance.unread(torch.no_grad()(honest["f"])) is None


def test_text_the_child_captured_is_compared_with_the_reference_as_evidence():
    """What the hook kept (refused text, the library's writing for the submission) is read like
    the submission's files: a flag for the instructor, never a zero (the text did not run)."""
    import re

    from autograder.trusted.reference import captured_evidence

    hexed = re.search(r'"([0-9a-f]{200,})"', (REDTEAM / "copy_print_self_exec.py").read_text())
    pasted = bytes.fromhex(hexed.group(1)).decode()
    found = captured_evidence([("refused: compiled at run time as '<string>'", pasted)])
    assert set(found) == {"compute_entropy"} and found["compute_entropy"].share >= 0.9
    assert found["compute_entropy"].threshold is None and not found["compute_entropy"].penalized
    assert "in text compiled at run time" in found["compute_entropy"].holder
    assert captured_evidence([("the helper module helper.py, served", pasted)]) == {}
    assert captured_evidence([("refused: compiled at run time as '<string>'",
                               HONEST_ENTROPY)]) == {}


@pytest.mark.parametrize("then, says", [
    ("", None),
    ("    sys.modules.pop('course.chunked_head')\n    import course.chunked_head\n",
     "imported once while grading"),
    ("    _compute_dtype.__kwdefaults__ = {'grader_audit_': print}\n",
     "building or replacing a code object"),
], ids=["counted", "imported again", "default rebound"])
def test_calls_into_the_given_head_are_counted_where_the_submission_cannot_write(tmp_path, then,
                                                                                 says):
    loaded = _load(tmp_path, "import sys\nimport torch\n"
                             "from course.chunked_head import _compute_dtype\n\n\n"
                             "def compute_entropy(logits):\n    _compute_dtype(logits)\n"
                             + then + "    return logits.sum(-1)\n")
    if says is None:
        assert loaded["call"]["given_head_calls"] >= 1, loaded["call"]
    else:
        assert loaded["call"]["status"] == "error" and says in loaded["call"]["message"], \
            loaded["call"]


# ---- what the probes measure, against a submission that rewrites what it can reach ------------
MEASURED = """
W = torch.ones(3, requires_grad=True)


def compute_entropy(logits):
    return (logits.exp() * W).sum(-1)  # requires grad; keeps exp's 2 x 3 float32 for backward
"""

# every module dict of the grader's that a class's methods lead to (`__globals__`), walked down
# through the modules and functions they name: each callable there, and each method of the
# grader's classes, becomes a liar; what the wire's answer is written with (`os.write`,
# `json.dumps`) rewrites true as false; a property on each class hands over the objects it is
# read on (the provenance, its counter of calls into the given head); autograd's flag is a
# property that says False, and a torch function mode on torch's stack answers False to every
# read of it.
REWRITE_EVERYTHING = """import json
import os
import types

import torch
from torch.overrides import TorchFunctionMode


def _classes():
    todo, seen = [object], set()
    while todo:
        cls = todo.pop()
        if id(cls) not in seen:
            seen.add(id(cls))
            try:
                todo += type.__subclasses__(cls)
            except TypeError:
                pass
            yield cls


def _liar(*args, **kwargs):
    return {"status": "ok", "requires_grad": {"": False}, "saved_bytes": 0, "output": 0}


_theirs = [c for c in _classes() if str(getattr(c, "__module__", "")).startswith("autograder")]
_todo = [getattr(getattr(v, "__func__", v), "__globals__", None) for c in _theirs
         for v in list(vars(c).values())]
_found = {}
while _todo:
    _namespace = _todo.pop()
    if isinstance(_namespace, dict) and id(_namespace) not in _found \\
            and str(_namespace.get("__name__")).startswith("autograder"):
        _found[id(_namespace)] = _namespace
        _todo += [vars(v) if isinstance(v, types.ModuleType) else getattr(v, "__globals__", None)
                  for v in list(_namespace.values())]
REPORT = {"modules": sorted(str(n["__name__"]) for n in _found.values()), "rebound": 0}
for _namespace in _found.values():
    for _name, _value in list(_namespace.items()):
        if callable(_value) and not _name.startswith("__"):
            _namespace[_name] = _liar
            REPORT["rebound"] += 1
for _cls in _theirs:
    for _name, _value in list(vars(_cls).items()):
        if isinstance(_value, types.FunctionType):
            setattr(_cls, _name, _liar)
            REPORT["rebound"] += 1
_stolen = []  # a property on the grader's classes is handed each object it is read on


def _stealing(name):
    return property(lambda self: _stolen.append(type(self).__name__) or vars(self)[name])


for _cls in _theirs:
    for _name in ("given_calls", "captured", "namespaces", "origins", "helpers", "read",
                  "compile_read", "capture"):
        setattr(_cls, _name, _stealing(_name))
REPORT["stolen"] = _stolen
_write, _dumps = os.write, json.dumps
os.write = lambda fd, data: _write(fd, bytes(data).replace(b"true", b"false"))
json.dumps = lambda *args, **kwargs: _dumps(*args, **kwargs).replace("true", "false")


class _Liar(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        return False if getattr(func, "__self__", None) is torch._C.TensorBase.requires_grad \\
            else result


_Liar().__enter__()
torch.Tensor.requires_grad = property(lambda self: False)
"""


def test_what_the_submission_rewrites_of_the_grader_changes_no_measurement(tmp_path):
    """The probes, the wire and the saved-bytes count run as sealed copies bound before the
    submission loads (`autograder.untrusted.seal`), and read autograd with torch functions
    disabled: a submission that rebinds every callable of the grader's it can reach, and the
    library calls an answer is written with, changes nothing the probes answer."""
    honest = _load(tmp_path, "import torch\n" + MEASURED)["call"]
    assert honest["requires_grad"] == {"": True} and honest["saved_bytes"] == 2 * 3 * 4, honest
    assert honest["given_head_calls"] == 0 and honest["status"] == "ok"
    attacked = _load(tmp_path, REWRITE_EVERYTHING + MEASURED)
    # (the saved-bytes count defines no class, so no class's methods lead to it)
    assert "autograder.protocol.wire" in attacked["report"]["modules"] \
        and attacked["report"]["rebound"] > 50, attacked["report"]
    assert attacked["statuses"] == {"compute_entropy": "ok"}, attacked
    assert attacked["report"]["stolen"] == []
    assert attacked["call"] == honest, (attacked["call"], attacked["report"])


# what could hide from a count kept while the call runs, and cannot from one read off the graph
# after it: autograd's push of saved-tensor hooks, bound by name at load, used during the call
# (hooks inside a counter's take precedence: the saved exp never reaches it); tracing left on
# (autograd then hands no hook what it saves); the forward run in a thread of its own (autograd's
# stack of hooks is per thread); the exp kept as an attribute of a custom function's context
PREBOUND_PUSH = """import torch
from torch._C._autograd import _pop_saved_tensors_default_hooks as pop
from torch._C._autograd import _push_saved_tensors_default_hooks as push
""" + MEASURED.replace("    return", """    push(lambda t: t, lambda t: t)
    try:
        return""") + "    finally:\n        pop()\n"
TRACING_AT_LOAD = "import torch\ntorch._C._autograd._saved_tensors_hooks_set_tracing(True)\n" \
    + MEASURED
IN_A_THREAD = "import threading\nimport torch\n" + MEASURED.replace("    return", """    out = []
    worker = threading.Thread(target=lambda: out.append(inner(logits)))
    worker.start()
    worker.join()
    return out[0]


def inner(logits):
    return""")
ON_THE_CONTEXT = """import torch
W = torch.ones(3, requires_grad=True)


class Kept(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, w):
        ctx.kept = {"exp": [logits.exp()]}
        return (ctx.kept["exp"][0] * w).sum(-1)

    @staticmethod
    def backward(ctx, grad):
        return None, (ctx.kept["exp"][0] * grad[:, None]).sum(0)


def compute_entropy(logits):
    return Kept.apply(logits, W)
"""


@pytest.mark.parametrize("text, hidden", [
    (PREBOUND_PUSH, ["saved-tensor hooks 'compute_entropy.<locals>.<lambda>'"]),
    (TRACING_AT_LOAD, []), (IN_A_THREAD, []), (ON_THE_CONTEXT, [])])
def test_what_autograd_keeps_is_read_off_the_graph_however_the_call_ran(tmp_path, text, hidden):
    """The saved-bytes count walks the graph behind the output after the call
    (`saved_bytes.saved_bytes`): hooks of the submission's own are named however early it bound
    autograd's push, and a forward with tracing on, in a thread, or keeping its tensor on a
    context is counted (the honest count of the same function is 2 x 3 float32, above)."""
    attacked = _load(tmp_path, text)
    assert attacked["statuses"] == {"compute_entropy": "ok"}, attacked
    assert attacked["call"]["saved_hidden"] == hidden, attacked["call"]
    assert attacked["call"]["saved_bytes"] == (0 if hidden else 2 * 3 * 4), attacked["call"]


def test_a_sealed_module_reads_its_names_where_rebinding_the_originals_does_not_reach():
    """`seal`: a copy of each function on a private dict; the functions another sealed module
    names, or a table holds, are the copies; dicts, lists and sets are copies of their own."""
    import types

    from autograder.untrusted.seal import seal

    low, high = types.ModuleType("low"), types.ModuleType("high")
    exec("LIMIT = [3]\n\ndef measure(x):\n    return min(x, LIMIT[0])\n", vars(low))
    vars(high).update(low=low, measure=vars(low)["measure"])
    exec("TABLE = {'call': measure}\n\ndef answer(x):\n    return TABLE['call'](x), "
         "low.measure(x), len([x])\n", vars(high))
    sealed = seal((low, high))["high"]
    assert sealed.answer(5) == (3, 3, 1)

    def liar(*args):
        return 0

    vars(low).update(measure=liar, min=liar)
    vars(high).update(TABLE={"call": liar}, low=types.SimpleNamespace(measure=liar), len=liar)
    vars(low)["LIMIT"][0] = 100
    assert high.answer(5) == (0, 0, 0)  # the originals lie
    assert sealed.answer(5) == (3, 3, 1)  # the sealed copies do not
    assert sealed.answer.__globals__ is not vars(high) and sealed.TABLE["call"] is not liar


def test_a_mode_left_on_torchs_stacks_does_not_change_what_the_train_step_probe_reads():
    """A dispatch mode (or a function mode) the submission left on torch's stacks sees the ops the
    grader runs after its call: the parameters and their gradients are read with both off."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from autograder.protocol.saved_bytes import module_tensors
    from autograder.untrusted.probes import _flat_parameters, _grads_left

    class Zeroes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            return torch.zeros_like(result) if isinstance(result, torch.Tensor) else 0

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    parameters = module_tensors(model)
    assert [id(p) for p in parameters] == [id(p) for p in model.parameters()]
    parameters[0].grad = torch.ones(2, 2)
    mode = Zeroes()
    mode.__enter__()
    try:
        assert not bool(torch.ones(1).count_nonzero())  # the mode lies to whoever asks
        flat, left = _flat_parameters(parameters), _grads_left(parameters)
    finally:
        mode.__exit__(None, None, None)
    assert left and torch.equal(flat, torch.cat([p.detach().reshape(-1).double()
                                                 for p in model.parameters()]))
