"""The grader's own tests: full marks for correct code, lost points (with the right diagnosis) for
real bugs, nothing gained by attacks, and a blank release notebook scoring 0 without a crash.

Each submission is graded only on its own functions, two gradings at a time (one worker each).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from shared_template import SharedTemplates

from autograder.api import grade
from autograder.trusted.reference import THRESHOLDS
from course.registry import GRADED_FUNCTIONS

pytestmark = pytest.mark.slow  # each grading starts a worker (~4 s); about 2 min for the module (2 cores)

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "autograder_cases"

# bug -> (graded function, check that must lose points, words the diagnosis must contain)
MUTANTS = {
    "no_shift": ("tokenize_prompt_and_output", "values match", "missing label shift"),
    "prompt_in_mask": ("tokenize_prompt_and_output", "values match", "prompt tokens in the mask"),
    "padding_in_mask": ("tokenize_prompt_and_output", "values match", "padding in the mask"),
    "unshifted_mask": ("tokenize_prompt_and_output", "values match", "not shifted with the labels"),
    "pad_with_eos": ("tokenize_prompt_and_output", "values match", "padding with eos"),
    "joint_encoding": ("tokenize_prompt_and_output", "values match", "encoded together as one string"),
    "entropy_log2": ("compute_entropy", "values match", "log base 2"),
    "entropy_no_minus": ("compute_entropy", "values match", "without the minus sign"),
    "naive_entropy": ("compute_entropy", "stable for large logits", "logsumexp"),
    "probs_not_log": ("get_response_log_probs", "log_probs match", "probabilities instead of log-probabilities"),
    "half_log_softmax": ("get_response_log_probs", "bfloat16 model", "half precision"),
    "entropy_with_grad": ("get_response_log_probs", "token_entropy", "requires grad"),
    "format_as_reward": ("compute_rollout_rewards", "rewards (float32)", "format reward"),
    "biased_std": ("compute_group_normalized_rewards", "std-normalized", "biased std"),
    "eps_inside_sqrt": ("compute_group_normalized_rewards", "std-normalized", "eps inside the square root"),
    "batch_normalization": ("compute_group_normalized_rewards", "std-normalized", "whole batch"),
    "grpo_max": ("compute_policy_gradient_loss", "grpo: -min", "max instead of min"),
    "clip_wrong_side": ("compute_policy_gradient_loss", "clip_fraction", "wrong side"),
    "gspo_product": ("compute_policy_gradient_loss", "gspo", "product of token ratios"),
    "cispo_attached": ("compute_policy_gradient_loss", "cispo", "not detached"),
    "masked_nan_gradient": ("compute_policy_gradient_loss", "never leak into the gradient", "0·∞ = nan"),
    "swapped_clip": ("compute_grpo_loss", "dapo", "swapped"),
    "tis_on_kl": ("compute_grpo_loss", "dapo", "applied to the KL"),
    "k3_sign": ("estimate_kl", "k1, k2, k3", "sign of delta reversed".replace("delta", "δ")),
    "tis_inverted": ("truncated_importance_weights", "capped above", "ratio inverted"),
    "empty_row_dropped": ("aggregate_loss_across_microbatch", "sequence:", "empty sequence left out"),
    "local_token_count": ("aggregate_loss_across_microbatch", "token:", "per-micro-batch token normalization"),
    # the 2026 normalization bugs: each diagnosis names the bug and its public source
    "per_microbatch_token_norm": ("grpo_train_step", "update independent of micro-batching",
                                  "per-micro-batch token mean (each micro-batch divided by its own token count, "
                                  "then by the number of accumulation steps; verl's legacy dp_actor, #7321)"),
    "double_accumulation_division": ("grpo_train_step", "update independent of micro-batching",
                                     "accumulation steps twice (ms-swift #10117)"),
    "no_grad_clip": ("grpo_train_step", "clips the global gradient norm", "clipping not applied"),
    "grads_left": ("grpo_train_step", "leaves no gradients behind", "still hold gradients"),
    "ddp_no_world_scale": ("grpo_train_step", "data-parallel",
                           "the world-size factor dropped (dp_size, Arctic-Platform #119)"),
    "ddp_seq_mean_divided_by_world": ("grpo_train_step", "data-parallel",
                                      "in the wrong direction: the sequence-mean loss divided by the world size "
                                      "where it should be multiplied, so the update is world size² too small "
                                      "(verl #5798)"),
    "ddp_world_scale_after_clipping": ("grpo_train_step", "data-parallel",
                                       "put back on the gradients after clipping: the loss without it, "
                                       "clip_grad_norm_ bounded 1/world size of the step's gradient"),
    # one per check that had none (so every CPU check catches at least one real bug)
    "float_mask": ("tokenize_prompt_and_output", "(B, L-1) and integer", "must be integer"),
    "mask_one_past_end": ("tokenize_prompt_and_output", "response_mask is 1 exactly", "but response_mask has"),
    "tokenize_zip_truncates": ("tokenize_prompt_and_output", "different lengths raise ValueError",
                               "should raise ValueError"),
    "entropy_no_upcast": ("compute_entropy", "keeps the leading shape", "expected torch.float32"),
    "chunks_of_the_sequence": ("get_response_log_probs", "chunked output head",
                               "logits_chunk_size=1 does not match the reference"),
    "negative_chunk_accepted": ("get_response_log_probs", "invalid logits_chunk_size",
                                "logits_chunk_size=-1 should raise ValueError"),
    "rewards_zip_truncates": ("compute_rollout_rewards", "different lengths raise ValueError",
                              "should raise ValueError, got a result"),
    "rft_mean_subtracted": ("compute_group_normalized_rewards", "baseline='none' (RFT)",
                            "mean subtracted although baseline='none'"),
    "metadata_of_raw_rewards": ("compute_group_normalized_rewards", "metadata advantage_mean",
                                "metadata['advantage_mean'] is"),
    "eps_ignored": ("compute_group_normalized_rewards", "equal rewards gets finite zero", "NaN/inf advantages"),
    "constant_as_token_mean": ("aggregate_loss_across_microbatch", "constant: masked sum",
                               "a masked mean instead of the masked sum"),
    "constant_unchecked": ("aggregate_loss_across_microbatch", "non-positive or missing constants",
                           "should raise ValueError"),
    "none_sign_flipped": ("compute_policy_gradient_loss", "none: -A*log pi",
                          "none per-token loss (on response tokens) does not match"),
    "noclip_ratio_inverted": ("compute_policy_gradient_loss", "noclip:", "ratio inverted"),
    "noclip_old_attached": ("compute_policy_gradient_loss", "noclip:", "not detached"),
    "cliprange_default": ("compute_policy_gradient_loss", "missing old_log_probs or cliprange",
                          "grpo without cliprange should raise ValueError"),
    "grpo_loss_cispo_attached": ("compute_grpo_loss", "cispo:", "CISPO weight not detached"),
    "kl_none_without_ref": ("compute_grpo_loss", "kl is zeros", "should be a torch.Tensor, got NoneType"),
    "kl_under_no_grad": ("estimate_kl", "gradient flows", "k3 has no gradient with respect to new_logprobs"),
    "tis_with_grad": ("truncated_importance_weights", "carry no gradient", "weights require grad"),
    "zero_advantage_rows_skipped": ("grpo_train_step", "full-batch update",
                                    "counts only rows with non-zero advantage"),
    "token_count_with_prompt": ("grpo_train_step", "metadata: loss", "metadata['response_token_count'] is"),
    "non_finite_step_skipped": ("grpo_train_step", "non-finite loss raises", "gave no error"),
    # padding that holds nan/inf must not reach the loss
    "padding_leaks_nan": ("aggregate_loss_across_microbatch", "masked positions never leak", "leaks them"),
    # an empty response's 0/0 is not a leak: the diagnosis names the division
    "empty_row_zero_over_zero": ("aggregate_loss_across_microbatch", "masked positions never leak",
                                 "divides 0 by its count of 0"),
    # constants that satisfy a property check are paid nothing without their value check
    "tis_zeros": ("truncated_importance_weights", "carry no gradient", "paid only when"),
    "train_step_no_update": ("grpo_train_step", "leaves no gradients behind", "paid only when"),
    "chunk_no_recompute": ("get_response_log_probs", "saves about one chunk of logits",
                           "recompute each chunk's logits in backward"),
    # the plain path must be the student's own, not the given chunked head
    "plain_path_uses_chunked_head": ("get_response_log_probs", "log_probs match the reference",
                                     "called the given chunked head"),
}
MEMORY_CHECK = "chunked scoring saves about one chunk of logits"
# submissions that implement nothing, whatever they raise or return: at most 5% of the points
DO_NOTHING = ("raises_value_error", "returns_zeros", "not_implemented")
ALTERNATIVES = {
    "alt_full.py": None,
    "alt_loops.py": ("tokenize_prompt_and_output", "compute_entropy", "compute_group_normalized_rewards",
                     "aggregate_loss_across_microbatch"),
    "alt_functional.py": ("estimate_kl", "truncated_importance_weights", "compute_grpo_loss"),
    "alt_vectorized.py": ("tokenize_prompt_and_output", "compute_entropy", "get_response_log_probs",
                          "compute_rollout_rewards", "estimate_kl"),
}
ATTACK_FUNCTIONS = ("compute_entropy", "compute_group_normalized_rewards")
ATTACKS = ("patch_torch", "os_exit", "sys_exit", "fake_output", "results_json", "infinite_loop",
           "memory_bomb", "equal_tensor", "read_fixtures", "delegate", "patch_pytest")  # + conftest, below


@pytest.fixture(scope="module")
def templates():
    """The module's two shared templates (`tests/shared_template.py`), for the gradings of
    submissions that attack nothing: the attacks below get a template each, as the product does."""
    with SharedTemplates() as shared:
        yield shared


def _grade_all(jobs: dict, templates: SharedTemplates | None = None) -> dict:
    """Two gradings at a time: on `templates`, or each on a template of its own."""
    if templates:
        return templates.grade_all(jobs)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(grade, *args, **kwargs) for key, (args, kwargs) in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


@pytest.fixture(scope="module")
def mutant_grades(templates) -> dict:
    return _grade_all({bug: ((str(CASES / f"mutant_{bug}.py"), (function,)), {"seed": 1234})
                       for bug, (function, _, _) in MUTANTS.items()}, templates)


@pytest.fixture(scope="module")
def attack_grades() -> dict:
    return _grade_all({name: ((str(CASES / f"attack_{name}.py"), ATTACK_FUNCTIONS),
                              {"probe_timeout": 4.0, "memory_mb": 3072})
                       for name in ATTACKS})


def test_mutant_collection_is_large_enough():
    assert len(MUTANTS) >= 25 and len(ATTACKS) + 1 >= 10
    assert all((CASES / f"mutant_{bug}.py").exists() for bug in MUTANTS)


def test_every_cpu_check_is_the_target_of_a_mutant():
    """The project rule: every check catches at least one buggy implementation in tests/. The list
    is the grader's own registry. Exempt: cuda-only checks, which cannot run on the CPU CI machine
    (none today: the peak-GPU-memory bound is part of the any-device saved-bytes check)."""
    import autograder.trusted.checks  # noqa: F401  (registers the checks)
    from autograder.trusted.core import CHECKS

    def aimed_at(check, function, words):
        return function == check.function and words in check.name
    cpu_checks = [c for c in CHECKS if not c.needs_cuda]
    assert len(cpu_checks) >= 40
    uncovered = [c.name for c in cpu_checks if not any(aimed_at(c, f, w) for f, w, _ in MUTANTS.values())]
    assert not uncovered, f"checks no mutant in MUTANTS is aimed at: {uncovered}"
    stray = [bug for bug, (f, w, _) in MUTANTS.items() if not any(aimed_at(c, f, w) for c in cpu_checks)]
    assert not stray, f"MUTANTS entries whose check words name no CPU check: {stray}"


def test_every_gate_is_a_value_check_of_the_same_function():
    import autograder.trusted.checks  # noqa: F401  (registers the checks)
    from autograder.trusted.core import CHECK_NAMED, CHECKS

    gated = [c for c in CHECKS if c.gate]
    assert len(gated) >= 10
    for c in gated:
        gate = CHECK_NAMED[c.gate]
        assert gate.function == c.function and not gate.gate, c.name


@pytest.fixture(scope="module")
def do_nothing_grades(templates) -> dict:
    return _grade_all({name: ((str(CASES / f"nothing_{name}.py"),), {"seed": 99}) for name in DO_NOTHING},
                      templates)


@pytest.mark.parametrize("name", DO_NOTHING)
def test_a_submission_that_implements_nothing_scores_at_most_5_percent(name, do_nothing_grades):
    graded = do_nothing_grades[name]
    paid = {n: r["output"] for n, r in graded["results"].items() if r["score"]}
    assert graded["max_score"] > 50 and graded["score"] <= 0.05 * graded["max_score"], paid
    gated = [r["output"] for r in graded["results"].values() if "paid only when" in r["output"]]
    assert gated or name != "returns_zeros"  # the zeros pass property checks: the gate says why they pay 0


def _memorizing_notebook(path: Path) -> None:
    """A train step that knows the stored cases' answers and applies them without computing."""
    import base64
    import io

    import torch

    from autograder.trusted.grader import load_fixtures

    table = {seed: {"responses": entry["inputs"]["rollout_responses"], **entry["expected"]}
             for seed, entry in load_fixtures()["grpo_train_step/rollouts"]["seeds"].items()}
    buffer = io.BytesIO()
    torch.save(table, buffer)
    encoded = base64.b64encode(buffer.getvalue()).decode()
    parts = [encoded[i:i + 200_000] for i in range(0, len(encoded), 200_000)]  # cells are capped
    sources = [f"ANSWERS_{i} = {part!r}" for i, part in enumerate(parts)]
    sources.append(f"""import base64, io, torch
ANSWERS = {" + ".join(f"ANSWERS_{i}" for i in range(len(parts)))}

def grpo_train_step(model, rollout_responses, max_grad_norm=None, old_log_probs=None,
                    pg_method="none", loss_normalization="sequence", **kwargs):
    table = torch.load(io.BytesIO(base64.b64decode(ANSWERS)), weights_only=True)
    for stored in table.values():
        if all(r in stored["responses"] for r in rollout_responses):  # a stored case or a shard of one
            break
    else:
        return torch.zeros(()), {{}}
    if pg_method == "noclip":
        raise RuntimeError("non-finite loss")
    mode = "grpo" if pg_method == "grpo" else loss_normalization
    answer = stored["clipped"] if max_grad_norm is not None else stored[mode]
    with torch.no_grad():
        offset = 0
        for p in model.parameters():
            p += answer["delta"][offset:offset + p.numel()].view_as(p).to(p.dtype)
            offset += p.numel()
    return torch.tensor(answer["loss"]), dict(answer["metadata"])
""")
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
             for source in sources]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def test_a_memorized_train_step_answer_earns_nothing(tmp_path):
    _memorizing_notebook(tmp_path / "06_memorized.ipynb")
    graded = grade(str(tmp_path), ("grpo_train_step",), seed=7)
    outputs = {n: r["output"] for n, r in graded["results"].items()}
    assert graded["max_score"] >= 12 and graded["score"] == 0, outputs
    value_checks = [n for n in outputs if "paid only when" not in outputs[n]]
    assert len(value_checks) >= 5  # full batch, micro-batching, data-parallel, metadata, clipping
    for name in value_checks:  # each knew the stored case and failed only the fresh one
        assert "stored cases passed but fresh inputs do not" in outputs[name], (name, outputs[name])


@pytest.mark.parametrize("bug", sorted(MUTANTS))
def test_mutant_loses_points_with_its_diagnosis(bug, mutant_grades):
    function, check_words, diagnosis = MUTANTS[bug]
    graded = mutant_grades[bug]
    assert graded["score"] < graded["max_score"], f"{bug} got full marks"
    failing = {name: r for name, r in graded["results"].items() if r["status"] == "failed"}
    target = [name for name in failing if check_words in name]
    assert target, f"{bug} did not fail a check containing {check_words!r}; failed: {sorted(failing)}"
    outputs = " | ".join(failing[name]["output"] for name in target)
    assert diagnosis in outputs, f"{bug}: diagnosis {diagnosis!r} not in {outputs!r}"


def test_a_wrong_denominator_is_not_called_a_leak(mutant_grades):
    """The per-micro-batch token count also fails the leak check (its losses are wrong with or
    without inf/nan), which must say that nothing leaks and send the student to the check that
    names the bug, not to a leak that is not there."""
    results = mutant_grades["local_token_count"]["results"]
    leak = [r for name, r in results.items() if "masked positions never leak" in name]
    assert len(leak) == 1 and leak[0]["status"] == "failed", leak
    assert "nothing leaks, fix that one first" in leak[0]["output"], leak[0]["output"]
    assert "multiplying by the mask" not in leak[0]["output"]


def test_an_empty_response_divided_by_zero_is_not_called_a_leak(mutant_grades):
    """Code that selects with torch.where leaks nothing; its nan is the empty row's 0/0, and both
    the sequence check and the leak check say so, never "multiplying by the mask"."""
    results = mutant_grades["empty_row_zero_over_zero"]["results"]
    failed = {name: r["output"] for name, r in results.items() if r["status"] == "failed"}
    assert len(failed) == 2 and all("0/0" in output for output in failed.values()), failed
    assert not any("multiplying by the mask" in output for output in failed.values()), failed


def test_the_given_chunked_head_alone_earns_nothing(mutant_grades):
    """A get_response_log_probs that is all given code (the chunked head, for the plain path too)
    earns none of the function's points: the chunked checks pay only beside a plain path of the
    student's own."""
    graded = mutant_grades["plain_path_uses_chunked_head"]
    assert graded["score"] == 0, {n: r["output"] for n, r in graded["results"].items()}
    chunked = [r["output"] for n, r in graded["results"].items() if "chunked" in n]
    assert len(chunked) == 2 and all("plain path of your own" in o for o in chunked), chunked


def test_chunk_without_recomputation_loses_exactly_the_memory_check(mutant_grades):
    """The saved-bytes check is the only one a chunked head that keeps every chunk's logits fails
    (its values are right): one point, with the fix named (tests/test_memory_check.py counts the
    bytes themselves)."""
    graded = mutant_grades["chunk_no_recompute"]
    failed = {name: r["output"] for name, r in graded["results"].items() if r["status"] == "failed"}
    assert list(failed) == [n for n in graded["results"] if MEMORY_CHECK in n], failed
    assert "recompute each chunk's logits in backward" in next(iter(failed.values()))
    assert graded["score"] == graded["max_score"] - 1


@pytest.fixture(scope="module")
def alternative_grades(templates) -> dict:
    return _grade_all({name: ((str(CASES / name), functions), {}) for name, functions in ALTERNATIVES.items()},
                      templates)


@pytest.mark.parametrize("name", sorted(ALTERNATIVES))
def test_independent_correct_implementations_get_full_marks(name, alternative_grades):
    graded = alternative_grades[name]
    failed = {n: r["output"] for n, r in graded["results"].items() if r["status"] == "failed"}
    assert not failed and graded["score"] == graded["max_score"] > 0


@pytest.mark.parametrize("name", ATTACKS)
def test_attacks_earn_nothing(name, attack_grades):
    graded = attack_grades[name]
    assert graded["max_score"] > 0
    assert graded["score"] == 0, {n: r["output"] for n, r in graded["results"].items() if r["score"]}
    assert not (ROOT / "conftest.py").exists() and not (ROOT / "autograder" / "pytest.ini").exists()


def test_attack_diagnoses_name_what_happened(attack_grades):
    def outputs(name):
        return " ".join(r["output"] for r in attack_grades[name]["results"].values())
    assert "timed out" in outputs("infinite_loop")
    assert "could not be loaded" in outputs("os_exit")
    assert "only calls the reference" in outputs("delegate")


def _blank_notebook(path: Path) -> None:
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": "import torch\nfrom course.loop.models import build_tokenizer\n"},
             {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": "while True:\n    pass  # an exploration cell the grader must not run\n"},
             {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": "def broken(:\n    pass\n"}]
    for name in GRADED_FUNCTIONS:
        cells.append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                      "source": f"def {name}(*args, **kwargs):\n    ### BEGIN SOLUTION\n"
                                f"    raise NotImplementedError\n"})
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def test_blank_release_notebook_scores_zero_without_crash(tmp_path):
    _blank_notebook(tmp_path / "01_blank.ipynb")
    graded = grade(str(tmp_path))
    assert graded["max_score"] > 50 and graded["score"] == 0
    outputs = [r["output"] for r in graded["results"].values()]
    assert any("NotImplementedError" in o for o in outputs)
    assert any("SyntaxError" in e and "code cell 3" in e for e in graded["load_errors"])


def test_cli_grades_the_reference_with_full_marks_and_results_json(tmp_path):
    """Run under the default CPU capability where the CPU has a wider one: the trusted side's maths
    (SIMD width) then differ from the worker's, which runs the native one (tests/test_portability.py)."""
    import torch

    native = torch.backends.cpu.get_cpu_capability().lower()
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"} if native != "default" else None
    results = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "autograder", "--submission", "course",
                          "--results", str(results), "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    document = json.loads(results.read_text())
    assert document["score"] == sum(t["max_score"] for t in document["tests"]) > 50
    assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(document["tests"][0])
    assert "TOTAL" in run.stdout and "7_train_step" in run.stdout


def test_cli_selects_with_k_and_fails_a_cheating_submission(tmp_path):
    results = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "autograder", "--submission",
                          str(CASES / "attack_results_json.py"), "--results", str(results), "-k", "compute_entropy",
                          "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    document = json.loads(results.read_text())
    assert document["score"] == 0 and all(t["name"].startswith("compute_entropy") for t in document["tests"])


def test_dropped_conftest_and_edited_grader_do_not_survive_into_the_next_run(tmp_path):
    """The attack writes conftest.py/pytest.ini into the repository and the grader's folder: run it
    on a copy of the repository, then check the copy is clean and the next run grades normally."""
    copy = tmp_path / "repo"
    for part in ("autograder", "course"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "checkpoints"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    (copy / "tests" / "autograder_cases").mkdir(parents=True)
    shutil.copy(CASES / "attack_conftest.py", copy / "tests" / "autograder_cases" / "attack_conftest.py")
    conftest_before = (copy / "autograder" / "conftest.py").read_text()

    def run(submission):
        results = tmp_path / "results.json"
        done = subprocess.run([sys.executable, "-m", "pytest", "autograder", "--submission", submission,
                               "--results", str(results), "-k", "compute_entropy", "-q", "-p", "no:cacheprovider"],
                              cwd=copy, capture_output=True, text=True, timeout=300)
        return done, json.loads(results.read_text())

    attacked, document = run("tests/autograder_cases/attack_conftest.py")
    assert attacked.returncode == 1 and document["score"] == 0
    assert (copy / "autograder" / "conftest.py").read_text() == conftest_before
    for folder in (copy, copy / "autograder", copy / "tests" / "autograder_cases"):
        assert not (folder / "conftest.py").exists() or folder.name == "autograder"
        assert not (folder / "pytest.ini").exists()
    honest, document = run("course")
    assert honest.returncode == 0 and document["score"] == sum(t["max_score"] for t in document["tests"]) > 0


def test_solution_notebooks_are_the_reference_and_release_notebooks_zero(templates):
    """The real notebooks: read (not run) from solutions/ and notebooks/ (nbgrader release)."""
    graded = _grade_all({"solutions": ((str(ROOT / "solutions"),), {"copies": "zero"}),
                         "checked": ((str(ROOT / "solutions"),), {"allow_reference": True}),
                         "notebooks": ((str(ROOT / "notebooks"),), {})}, templates)
    solutions, checked, release = graded["solutions"], graded["checked"], graded["notebooks"]
    # solutions/ holds the course's own functions (tests/test_one_implementation.py): read as a
    # student's submission under --copies zero, every graded function with a threshold is a
    # pasted copy of the reference and earns nothing (a leaked solution notebook is caught); the
    # dictated ones (the natural tokenizer is the reference's; tests/test_copies.py) keep theirs;
    # an instructor's check (--allow-reference) gives them full marks.
    zeroed = {name for name, threshold in THRESHOLDS.items() if threshold is not None}
    failed = {n: r["output"] for n, r in solutions["results"].items() if r["status"] == "failed"}
    assert {n.split(":")[0] for n in failed} == zeroed, failed
    assert all("is a copy of the reference" in output for output in failed.values()), failed
    assert set(solutions["similarity"]) == set(GRADED_FUNCTIONS) - {"tokenize_prompt_and_output"}
    functions = {name.split(":")[0] for name in solutions["results"]}
    assert functions == set(GRADED_FUNCTIONS), set(GRADED_FUNCTIONS) ^ functions  # each one, graded
    lost = {n: r["output"][:300] for n, r in checked["results"].items() if r["status"] == "failed"}
    assert checked["score"] == checked["max_score"] > 50, lost
    assert "--allow-reference" in checked["isolation"]
    assert release["score"] == 0 and release["max_score"] == solutions["max_score"]
    assert not checked["similarity"] and not release["similarity"]
    assert not solutions["load_failure"] and not release["load_failure"]
