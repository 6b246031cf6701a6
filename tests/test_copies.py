"""Authorship (`autograder.trusted.reference`): similarity to the reference is evidence (flagged with the matched lines, no points lost), and costs points only
under `--copies zero`, above thresholds that no honest implementation of the corpus
(tests/corpus.py) reaches. The class report pairs classmates however their functions are named.

Code built at run time is judged where it runs (tests/test_provenance.py). The real gradings of
the attacks are in tests/redteam/copy_*.py (tests/test_redteam.py, graded under `--copies zero`)
and below.
"""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from corpus import CORPUS, HONEST_DIR, corpus_shares, implementations
from near_copies import DISGUISES, near_copy_source, reference_definition

from autograder.api import grade
from autograder.trusted.grader import _sources
from autograder.trusted.reference import (
    FLAG_AT,
    FLOOR,
    HONEST_MAX,
    MARGIN,
    THRESHOLDS,
    authorship,
    copied_references,
    definitions_in,
    penalty_threshold,
    reference_shares,
)
from autograder.trusted.similarity import K, containment, fingerprints, kgrams, tokens, winnow
from course.registry import GRADED_FUNCTIONS, POINTS, STAGE_OF
from course.submissions.reader import load_submission
from instructor.classmates import definition_prints, graded_prints, similar_pairs

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "autograder_cases"
# a function whose natural implementation holds all of its reference: similarity proves nothing
DICTATED = [name for name in GRADED_FUNCTIONS if HONEST_MAX[name] >= 1.0]
FLAGGABLE = [name for name in GRADED_FUNCTIONS if name not in DICTATED]


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
def test_every_near_copy_is_flagged_with_evidence_and_zeroed_only_under_copies_zero(name, disguise):
    source = near_copy_source(name, disguise)
    if disguise != "reordered":  # a chain of dependent statements has nothing to swap
        assert ast.unparse(reference_definition(name)) != ast.unparse(_function(source))
    assert copied_references([source]) == {}  # the default: evidence, no points lost
    refused, evidence = authorship([source])
    assert refused == {}
    if name in DICTATED:  # honest work holds as much: neither flagged nor zeroed
        assert name not in evidence and copied_references([source], "zero") == {}
        return
    found = evidence[name]
    assert found.share >= 0.94 and found.honest_max == HONEST_MAX[name]
    assert f"the most similar honest implementation in the corpus holds {HONEST_MAX[name]:.0%}" \
        in found.summary()
    assert len(found.lines) >= 3 and all(left and right for left, right in found.lines[:3])
    zeroed = copied_references([source], "zero")
    assert (name in zeroed) == (THRESHOLDS[name] is not None), zeroed
    if name in zeroed:
        assert f"{name} is a copy of the reference" in zeroed[name] and "fingerprints" in zeroed[name]


def test_the_evidence_puts_the_reference_line_beside_the_students():
    """A pasted compute_entropy with its names changed: the reference's softmax line (line 39 of
    course/scoring.py) stands beside the student's, which is line 4 of the submission."""
    pasted = ("import torch\n\n"
              "def entropy_of(z):\n"
              "    if z.ndim == 0 or z.shape[-1] == 0:\n"
              "        raise ValueError('no vocabulary')\n"
              "    if z.dtype in (torch.float16, torch.bfloat16):\n"
              "        z = z.float()\n"
              "    z = z - z.amax(dim=-1, keepdim=True).detach()\n"
              "    p = torch.softmax(z, dim=-1)\n"
              "    e = torch.where(p > 0, p * z, 0.0).sum(dim=-1)\n"
              "    return torch.logsumexp(z, dim=-1) - e\n"
              "compute_entropy = entropy_of\n")
    found = authorship([pasted])[1]["compute_entropy"]
    assert found.share == 1.0 and found.holder == "entropy_of"
    reference_lines = (ROOT / "course" / "scoring.py").read_text().splitlines()
    softmax = next(i for i, line in enumerate(reference_lines, 1)
                   if "probs = torch.softmax(logits, dim=-1)" in line)
    assert (f"{softmax:>4}  probs = torch.softmax(logits, dim=-1)" in
            [left[:len(f"{softmax:>4}  probs = torch.softmax(logits, dim=-1)")]
             for left, _ in found.lines])
    assert any(right == "   9  p = torch.softmax(z, dim=-1)" for _, right in found.lines)
    assert " | " in found.text() and "submission `entropy_of`" in found.text()
    assert copied_references([pasted]) == {}
    assert "compute_entropy" in copied_references([pasted], "zero")


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
    assert "compute_group_normalized_rewards" in authorship([source])[1]
    assert "compute_group_normalized_rewards" in copied_references([source], "zero")


@pytest.mark.parametrize("spec", CORPUS)
def test_no_honest_implementation_is_refused_flagged_or_zeroed(spec):
    """The honest corpus, the natural first implementations included: under `--copies zero`, the
    strictest setting, nothing is refused and nothing is zeroed; nothing is even flagged."""
    sources = _sources(load_submission(str(ROOT / spec), ROOT))
    assert sources, spec
    assert copied_references(sources, "zero") == {}, spec
    assert authorship(sources) == ({}, {}), spec


def test_the_thresholds_are_the_corpus_maximum_plus_the_margin():
    measured = corpus_shares()
    for name in GRADED_FUNCTIONS:
        top = max(shares[name] for shares in measured.values())
        assert HONEST_MAX[name] == math.ceil(top * 100 - 1e-9) / 100, (name, top)
        threshold = THRESHOLDS[name]
        assert threshold == penalty_threshold(HONEST_MAX[name])
        assert threshold is None or threshold >= max(FLOOR, top + MARGIN - 0.005)
    # the natural tokenizer is the reference's, fingerprint for fingerprint: never zeroed
    assert measured["tests/honest/library_calls.py"]["tokenize_prompt_and_output"] == 1.0
    assert THRESHOLDS["tokenize_prompt_and_output"] is None and FLAG_AT < FLOOR


def test_the_corpus_holds_several_independent_versions_of_every_function():
    written = {name: [spec for spec in specs if spec.startswith("tests/honest/")]
               for name, specs in implementations().items()}
    short = ["compute_entropy", "compute_rollout_rewards", "compute_group_normalized_rewards",
             "estimate_kl", "truncated_importance_weights", "aggregate_loss_across_microbatch"]
    for name, specs in written.items():
        assert len(specs) >= (5 if name in short else 3), (name, specs)
    assert len(list(HONEST_DIR.glob("*.py"))) >= 5


def test_a_near_copy_holds_more_than_every_threshold():
    for name, threshold in THRESHOLDS.items():
        if threshold is not None:
            copies = [reference_shares(definitions_in(near_copy_source(name, d))[1])[name][0]
                      for d in DISGUISES]
            assert min(copies) >= threshold + 0.1, (name, copies)


def test_the_reference_itself_holds_all_of_its_fingerprints():
    for name in GRADED_FUNCTIONS:
        prints = fingerprints(reference_definition(name))
        assert len(prints) >= 10, name  # enough to measure a share on
        assert containment(prints, set(kgrams(tokens(reference_definition(name))))) == 1.0


def test_copies_in_the_files_a_submission_imports_are_found(tmp_path, monkeypatch):
    """A .py that imports a sibling module, a package that imports a submodule: both read."""
    (tmp_path / "helper.py").write_text(near_copy_source("estimate_kl", "all three"))
    (tmp_path / "work.py").write_text("from helper import estimate_kl\n")
    assert list(copied_references(_sources(load_submission(str(tmp_path / "work.py"), ROOT)),
                                  "zero")) == ["estimate_kl"]
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("from .impl import compute_entropy\n")
    (tmp_path / "mypkg" / "impl.py").write_text(near_copy_source("compute_entropy", "dead code"))
    monkeypatch.syspath_prepend(str(tmp_path))
    submission = load_submission("mypkg", ROOT)
    assert submission.kind == "module"
    assert list(authorship(_sources(submission))[1]) == ["compute_entropy"]


def test_a_notebook_that_provides_no_graded_function_is_not_read_for_the_grade(tmp_path):
    """Notebook 10 checks what is installed with importlib: it, like any notebook that defines no
    graded function, is not loaded; and the same import beside a graded function costs nothing
    either (the grader judges what graded functions run, not a module's imports)."""
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
    notebook("01_mine.ipynb", "import gc\nimport importlib.util\nimport inspect\n\n"
                              "def compute_entropy(logits):\n    return logits.sum(-1)\n")
    assert copied_references(_sources(load_submission(tmp_path, tmp_path))) == {}


RENAMED_AND_BOUND = """import torch

{body}

tokenize_prompt_and_output = f1
compute_entropy, estimate_kl = f2, f3
loop_a = loop_b
loop_b = loop_a
"""


def test_the_class_report_pairs_classmates_whose_functions_are_renamed_and_bound_back(tmp_path):
    """A classmate's file with every graded function renamed (`def f1`) and bound back by
    assignment is read as those graded functions, so the pair is reported."""
    names = {"f1": "tokenize_prompt_and_output", "f2": "compute_entropy", "f3": "estimate_kl"}
    honest = (HONEST_DIR / "tensors_first.py").read_text()
    (tmp_path / "ada.py").write_text(honest)
    renamed = "\n\n".join(ast.unparse(_renamed(honest, name, short))
                           for short, name in names.items())
    (tmp_path / "bob.py").write_text(RENAMED_AND_BOUND.format(body=renamed))
    prints = {student: graded_prints(str(tmp_path / f"{student}.py")) for student in ("ada", "bob")}
    assert set(names.values()) <= set(prints["bob"])
    assert all(prints["bob"][name] == prints["ada"][name] for name in names.values())
    pairs = similar_pairs(prints)
    assert [(a, b) for a, b, _ in pairs] == [("ada", "bob")]
    assert set(pairs[0][2]) >= set(names.values())


# every graded def renamed `_my_...` and bound back through keys no reading follows
BOUND_BY_KEYS = {
    "globals().update": 'globals().update({k.removeprefix("_my_"): v\n'
                        '                  for k, v in list(globals().items()) if k[:4] == "_my_"})',
    "a dict subscript": 'for _k in [k for k in globals() if k.startswith("_my_")]:\n'
                        '    globals()[_k[4:]] = globals()[_k]'}


def _bound_by_keys(folder: Path, binding: str) -> str:
    """ada.py (tests/honest/tensors_first.py) and bob.py, its copy bound back by `binding`, in
    `folder`; the original's text."""
    honest = (HONEST_DIR / "tensors_first.py").read_text()
    tree = ast.parse(honest)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in GRADED_FUNCTIONS:
            node.name = "_my_" + node.name
    (folder / "ada.py").write_text(honest)
    (folder / "bob.py").write_text(ast.unparse(tree) + "\n\n" + BOUND_BY_KEYS[binding] + "\n")
    return honest


@pytest.mark.parametrize("binding", BOUND_BY_KEYS)
def test_the_class_report_pairs_a_classmate_whose_names_are_bound_through_computed_keys(
        tmp_path, binding):
    """No graded name of the copy is fingerprinted by name, yet its definitions, compared with
    all of the original's whatever their names, pair the two students; the original beside
    every other honest entry of the corpus stays unpaired."""
    _bound_by_keys(tmp_path, binding)
    students = {s: str(tmp_path / f"{s}.py") for s in ("ada", "bob")}
    students |= {Path(spec).stem: str(ROOT / spec) for spec in CORPUS[:-1]
                 if spec != "tests/honest/tensors_first.py"}
    prints = {s: graded_prints(path) for s, path in students.items()}
    assert prints["bob"] == {}  # what the graded names alone see
    pairs = similar_pairs(prints, {s: definition_prints(path) for s, path in students.items()})
    assert [(a, b) for a, b, _ in pairs] == [("ada", "bob")], pairs
    assert len(pairs[0][2]) >= 8 and "compute_entropy ~ _my_compute_entropy" in pairs[0][2]


@pytest.mark.slow
def test_the_load_report_names_the_definition_judged_for_each_graded_name(tmp_path):
    """A real grading of the copy bound back through `globals().update`: the stage child reports
    the `_my_` definitions it judged, and the graded names' fingerprints read from there are the
    original's, so the pair holds by name too."""
    _bound_by_keys(tmp_path, "globals().update")
    functions = ("compute_entropy", "estimate_kl")
    graded = grade(str(tmp_path / "bob.py"), functions, official=True)
    assert graded["score"] == graded["max_score"] > 0, graded["results"]
    assert {name: Path(label).name for name, (label, _) in graded["judged"].items()
            if name in functions} == dict.fromkeys(functions, "bob.py")
    prints = graded_prints(str(tmp_path / "bob.py"), graded["judged"])
    original = graded_prints(str(tmp_path / "ada.py"))
    assert all(prints[name] == original[name] for name in functions)
    assert [(a, b) for a, b, _ in similar_pairs({"ada": original, "bob": prints})] \
        == [("ada", "bob")]


def _renamed(source: str, name: str, new: str) -> ast.FunctionDef:
    definition = next(node for node in ast.walk(ast.parse(source))
                      if isinstance(node, ast.FunctionDef) and node.name == name)
    definition.name = new
    return definition


def test_a_function_imported_under_a_graded_name_is_read_as_it(tmp_path):
    (tmp_path / "helper.py").write_text(near_copy_source("estimate_kl", "renamed").replace(
        "def estimate_kl(", "def my_kl("))
    (tmp_path / "work.py").write_text("from helper import my_kl as estimate_kl\n")
    assert "estimate_kl" in graded_prints(str(tmp_path / "work.py"))


@pytest.mark.slow
def test_a_graded_copy_keeps_its_points_flagged_and_loses_them_only_under_copies_zero(tmp_path):
    """Real gradings of a disguised copy of compute_entropy: by default it earns its points and the
    flag (with its evidence) reaches the instructor only, in the terminal and in a hidden test of
    results.json; `--copies zero` zeroes it and tells the student why."""
    submission = tmp_path / "copied.py"
    submission.write_text(near_copy_source("compute_entropy", "all three"))
    results = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "autograder", "--submission",
                          str(submission), "--results", str(results), "-k", "compute_entropy",
                          "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "SIMILAR TO THE REFERENCE" in run.stdout and "it cost no points" in run.stdout
    assert "holds 100% of the reference's fingerprints" in run.stdout
    document = json.loads(results.read_text())
    graded = [t for t in document["tests"] if t["visibility"] != "hidden"]
    flag = [t for t in document["tests"] if t["visibility"] == "hidden"]
    assert document["score"] == sum(t["max_score"] for t in graded) == POINTS["compute_entropy"]
    assert len(flag) == 1 and flag[0]["max_score"] == 0 and " | " in flag[0]["output"]
    assert not any("reference" in t["output"] for t in graded) and "similar" not in \
        document["output"].lower()
    assert document["extra_data"]["similarity"]["compute_entropy"]["zeroed"] is False
    strict = grade(str(submission), ("compute_entropy",), copies="zero")
    assert strict["score"] == 0 and strict["max_score"] == POINTS["compute_entropy"]
    assert all("is a copy of the reference" in r["output"] for r in strict["results"].values())
    assert strict["similarity"]["compute_entropy"]["zeroed"] is True
    assert "--copies zero" in strict["isolation"]
    assert STAGE_OF["compute_entropy"] == "2_scoring"


@pytest.mark.slow
def test_the_natural_tokenizer_keeps_its_points_under_copies_zero(tmp_path):
    """The natural first tokenizer, written into the release notebook beside its given `_pad_id`,
    holds every fingerprint of the reference; under the strictest setting it still earns all its
    points, and is not even flagged."""
    import nbformat

    notebook = nbformat.read(ROOT / "notebooks" / "01_tokenization.ipynb", as_version=4)
    template = next(cell for cell in notebook.cells if cell.cell_type == "code"
                    and "def tokenize_prompt_and_output" in cell.source)
    template.source = ast.unparse(_renamed((HONEST_DIR / "library_calls.py").read_text(),
                                           "tokenize_prompt_and_output",
                                           "tokenize_prompt_and_output"))
    (tmp_path / "work").mkdir()
    nbformat.write(notebook, tmp_path / "work" / "01_tokenization.ipynb")
    graded = grade(str(tmp_path / "work"), ("tokenize_prompt_and_output",), copies="zero")
    assert graded["score"] == graded["max_score"] == POINTS["tokenize_prompt_and_output"], \
        {n: r["output"][:300] for n, r in graded["results"].items()}
    assert graded["similarity"] == {}
