"""The copy rule (`autograder.trusted.reference.copied_references`): near-copies and code built at
run time earn nothing for the functions they copy; honest work in every style is never flagged.

The real gradings of the attacks are in tests/redteam/copy_*.py (tests/test_redteam.py).
"""

from __future__ import annotations

import ast
import base64
import zlib
from pathlib import Path

import pytest
from near_copies import DISGUISES, near_copy_source, reference_definition

from autograder.trusted.dynamic import dynamic_code
from autograder.trusted.grader import _sources
from autograder.trusted.reference import (
    COPY_THRESHOLD,
    copied_references,
    definitions_in,
    reference_shares,
)
from autograder.trusted.similarity import K, containment, fingerprints, kgrams, tokens, winnow
from course.registry import GRADED_FUNCTIONS
from course.submissions.reader import load_submission

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "autograder_cases"
HONEST = ["_impl.py", "alt_loops.py", "alt_functional.py", "alt_vectorized.py", "alt_full.py"]
# the margin kept below the threshold by every honest style (benchmarks/bench_similarity.py)
HONEST_MARGIN = 0.15


def _function(source: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef))


def test_tokens_erase_names_strings_and_docstrings_but_keep_what_is_called():
    a = _function('def f(x):\n    """doc"""\n    y = torch.softmax(x, dim=-1)\n    raise ValueError("a")')
    b = _function("def g(logits):\n    probs = torch.softmax(logits, dim=-1)\n    raise ValueError(f'b{1}')")
    assert tokens(a) == tokens(b)
    assert tokens(a)[1][:6] == ["Assign", "v", "Call", "Attribute", ".softmax", "torch"]
    other = _function("def f(x):\n    y = torch.log_softmax(x, dim=-1)\n    raise ValueError('a')")
    assert tokens(other) != tokens(a)


def test_winnowing_keeps_the_rightmost_minimum_of_every_window():
    # hand-worked: windows of W=4 over [5, 3, 3, 7, 9, 1, 4] pick 3 (index 2), 3, 1, 1
    hashes = ["5", "3", "3", "7", "9", "1", "4"]
    assert winnow(hashes) == {"3", "1"}
    assert winnow(["2", "1"]) == {"2", "1"}  # fewer than W: all of them


def test_no_kgram_spans_two_statements():
    f = _function("def f(x):\n    a = x + 1\n    b = x * 2\n    return a - b")
    swapped = _function("def f(x):\n    b = x * 2\n    pass\n    a = x + 1\n    return a - b")
    assert set(kgrams(tokens(f))) <= set(kgrams(tokens(swapped)))
    assert all(len(segment) < K for segment in tokens(f))  # short statements hash whole


@pytest.mark.parametrize("disguise", DISGUISES)
@pytest.mark.parametrize("name", GRADED_FUNCTIONS)
def test_every_near_copy_of_every_reference_is_caught(name, disguise):
    source = near_copy_source(name, disguise)
    if disguise != "reordered":  # a chain of dependent statements has nothing to swap
        assert ast.unparse(reference_definition(name)) != ast.unparse(_function(source))
    found = copied_references([source])
    assert name in found, (name, disguise, reference_shares(definitions_in(source)[1])[name])
    assert f"{name} is a copy of the reference" in found[name] and "fingerprints" in found[name]


def test_reordering_swaps_statements_in_most_references():
    moved = [name for name in GRADED_FUNCTIONS if ast.unparse(reference_definition(name))
             != ast.unparse(_function(near_copy_source(name, "reordered")))]
    assert len(moved) >= 5, moved


def test_a_copy_split_into_helpers_is_caught_through_the_calls():
    definition = reference_definition("compute_group_normalized_rewards")
    body = definition.body[1:]
    half = len(body) // 2
    helper = ast.FunctionDef("_first_half", definition.args, body[:half] + [
        ast.parse("return locals()").body[0]], [], None, None, type_params=[])
    main = ast.parse(ast.unparse(definition)).body[0]
    main.body = [ast.parse("_first_half(raw_rewards, group_size, baseline, advantage_eps, "
                           "advantage_normalizer)").body[0]] + body[half:]
    source = ast.unparse(ast.fix_missing_locations(ast.Module([helper, main], [])))
    assert "compute_group_normalized_rewards" in copied_references([source])


def _packed(source: str) -> str:
    return base64.b64encode(zlib.compress(source.encode())).decode()


PACKINGS = {
    "zlib + base64 + exec": "import base64, zlib\nexec(zlib.decompress(base64.b64decode('{p}')))",
    "compile + eval in a function": ("def compute_entropy(logits):\n"
                                     "    code = compile(TEXT, 'x', 'exec')\n"
                                     "    eval(code, globals())\n    return logits"),
    "exec hidden in a constant": "BOOT = exec(TEXT)",
    "marshal + FunctionType": ("import marshal, types\n"
                               "compute_entropy = types.FunctionType(marshal.loads(b''), {})"),
    "importlib from generated source": ("import importlib.util\n"
                                        "SPEC = importlib.util.spec_from_loader('m', None)"),
    "codecs rot13": "import codecs\nX = codecs.decode('...', 'rot13')",
    "getattr of builtins": "def f():\n    return getattr(__builtins__, 'ex' + 'ec')",
    "code object swapped": "def compute_entropy(x):\n    return x\ncompute_entropy.__code__ = None",
    "a frame's globals": "import sys\ndef f():\n    return sys._getframe().f_globals",
    # reaching the probes that measure the submission, to rewrite their answers
    "the grader's probes": "import autograder.untrusted.probes as p\np._requires_grad = None",
    "the grader's package": "from autograder import untrusted",
    "the garbage collector": "import gc\ndef f():\n    return gc.get_objects()",
    "stack frames": "from inspect import currentframe",
    "torch internals": "import torch\ndef f():\n    return torch._C",
}


@pytest.mark.parametrize("packing", PACKINGS)
def test_code_built_at_run_time_grades_nothing_and_says_where(packing):
    text = PACKINGS[packing].replace("{p}", _packed(near_copy_source("compute_entropy", "renamed")))
    found = copied_references([text])
    assert set(found) == set(GRADED_FUNCTIONS), packing
    assert "builds or reaches code at run time" in found["compute_entropy"]
    assert dynamic_code(ast.parse(text))


def test_the_rule_names_the_construct_and_the_function_that_holds_it():
    found = copied_references(["def compute_entropy(x):\n    return eval('x')"])
    assert "`eval` in `compute_entropy`" in found["estimate_kl"]


def test_honest_constructs_are_not_dynamic_code():
    honest = ("import torch\nimport math\nfrom dataclasses import dataclass\n"
              "from autograder.selfcheck import self_check\n"
              "def f(config, model):\n    fn = torch.compile(model)\n"
              "    return getattr(config, 'loss_fn'), getattr(getattr(model, 'config', None), "
              "'grpo_logits_chunk_size', 0), globals(), fn")
    assert dynamic_code(ast.parse(honest)) == []


@pytest.mark.parametrize("case", HONEST)
def test_honest_implementations_in_every_style_are_never_flagged(case):
    submission = load_submission(str(CASES / case), ROOT)
    sources = _sources(submission)
    assert copied_references(sources) == {}
    shares = reference_shares([d for s in sources for d in definitions_in(s)[1]])
    assert max(share for share, _ in shares.values()) <= COPY_THRESHOLD - HONEST_MARGIN, shares


def test_the_release_notebooks_and_the_tests_naive_versions_are_not_copies():
    for spec in ("notebooks", str(ROOT / "tests" / "naive.py")):
        sources = _sources(load_submission(spec, ROOT))
        assert sources and copied_references(sources) == {}, spec


def test_the_reference_itself_holds_all_of_its_fingerprints():
    for name in GRADED_FUNCTIONS:
        prints = fingerprints(reference_definition(name))
        assert len(prints) >= 10, name  # enough to measure a share on
        assert containment(prints, set(kgrams(tokens(reference_definition(name))))) == 1.0


def test_copies_in_the_files_a_submission_imports_are_found(tmp_path, monkeypatch):
    """A .py that imports a sibling module, a package that imports a submodule: both read."""
    (tmp_path / "helper.py").write_text(near_copy_source("estimate_kl", "all three"))
    (tmp_path / "work.py").write_text("from helper import estimate_kl\n")
    assert list(copied_references(_sources(load_submission(str(tmp_path / "work.py"), ROOT)))) \
        == ["estimate_kl"]
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("from .impl import compute_entropy\n")
    (tmp_path / "mypkg" / "impl.py").write_text(near_copy_source("compute_entropy", "dead code"))
    monkeypatch.syspath_prepend(str(tmp_path))
    submission = load_submission("mypkg", ROOT)
    assert submission.kind == "module"
    assert list(copied_references(_sources(submission))) == ["compute_entropy"]


def test_a_notebook_that_provides_no_graded_function_is_not_read_for_the_grade(tmp_path):
    """Notebook 09 checks what is installed with importlib (dynamic code by the rule): it, like any
    notebook that defines no graded function, is not loaded, so it costs the other notebooks
    nothing; the same import in a notebook that does define one zeroes the graded functions."""
    import nbformat

    def notebook(name: str, source: str) -> None:
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]),
                       tmp_path / name)

    notebook("01_mine.ipynb", "import torch\n\ndef compute_entropy(logits):\n"
                              "    p = torch.softmax(logits, -1)\n"
                              "    return -(p * torch.log_softmax(logits, -1)).sum(-1)\n")
    notebook("08_scratch.ipynb", "import importlib.util\nFOUND = importlib.util.find_spec('peft')\n")
    submission = load_submission(tmp_path, tmp_path)
    assert [unit["name"] for unit in submission.units] == ["01_mine.ipynb"]
    assert submission.providers == {"compute_entropy": 0}
    assert copied_references(_sources(submission)) == {}
    notebook("01_mine.ipynb", "import importlib.util\n\ndef compute_entropy(logits):\n"
                              "    return logits.sum(-1)\n")
    assert "compute_entropy" in copied_references(_sources(load_submission(tmp_path, tmp_path)))
