"""No verdict depends on the bit-exact floats of the machine that made the stored cases.

Two ways a machine differs: its maths (SIMD width, libm, thread count: `ATEN_CPU_CAPABILITY` and
`torch.set_num_threads` reproduce the CPU's share of that here), and the last bit of anything it
makes (simulated by moving every stored input and every model weight by one ulp). In both, the
reference keeps full marks and real bugs keep losing their points.

Grading runs in-process against the reference with the stored cases (the worker adds nothing to
the arithmetic). The end-to-end `pytest autograder --submission course` of tests/test_autograder.py
runs under a non-native capability, whose worker runs the native one: the two sides even disagree.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "autograder_cases"
# the data-parallel check forks ranks: slow to repeat under every setting here, and its own
# floats are the single-process ones (tests/test_points.py runs it in a kernel)
IN_PROCESS_EXEMPT = "data-parallel"


def capabilities() -> list[str]:
    """The ATEN_CPU_CAPABILITY values this CPU can run: the default and every x86 level below native."""
    native = torch.backends.cpu.get_cpu_capability().lower()
    levels = ["default", "avx2", "avx512"]
    return levels[: levels.index(native) + 1] if native in levels else ["default", native]


def _in_process_grader(namespace: dict | None, seed: int):
    """A grader that runs probes in this process: against `namespace`, or the reference when None."""
    from autograder.options import GradingOptions
    from autograder.selfcheck import InProcessRunner
    from autograder.trusted.grader import Grader
    from autograder.trusted.reference import reference
    from course.registry import GRADED_FUNCTIONS

    grader = Grader(None, GradingOptions(seed=seed), runner=InProcessRunner(namespace or {}, 'cpu'))
    if namespace is None:  # the reference itself, as the worker grades `--submission course`
        state = grader.runner.state
        state.functions = {name: reference(name) for name in GRADED_FUNCTIONS}
        state.statuses = dict.fromkeys(GRADED_FUNCTIONS, "ok")
        state.patch = None
    return grader


def grade_in_process(namespace: dict | None = None, functions=None, seed: int = 1234,
                     perturb: bool = False) -> dict:
    """{check name: (score, max, output)} of every CPU check that runs in-process."""
    from autograder.trusted import checks  # noqa: F401  (registers the checks)
    from autograder.trusted.core import CHECKS

    grader = _in_process_grader(namespace, seed)
    if perturb:
        grader.fixtures = one_ulp_away(grader.fixtures, torch.Generator().manual_seed(seed))
    selected = [c for c in CHECKS if not c.needs_cuda and IN_PROCESS_EXEMPT not in c.name
                and (functions is None or c.function in functions)]
    results = [grader.run_check(c) for c in selected]
    return {r["name"]: (r["score"], r["max_score"], r["output"]) for r in results}


def _nudge(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Every element one ulp up or down, at random."""
    up = torch.rand(t.shape, generator=g) < 0.5
    return torch.nextafter(t, torch.where(up, math.inf, -math.inf).to(t.dtype))


def one_ulp_away(value, g: torch.Generator):
    """Stored cases with every float input moved by one ulp; the stored answers kept as they are."""
    if isinstance(value, dict) and "seeds" in value:
        return {**value, "seeds": {seed: {"inputs": one_ulp_away(entry["inputs"], g), "expected": entry["expected"]}
                                   for seed, entry in value["seeds"].items()}}
    if isinstance(value, dict) and "__object__" in value:
        return value  # a marker (model, tokenizer, config): see ModelOneUlpAway
    if isinstance(value, dict):
        return {k: one_ulp_away(v, g) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(one_ulp_away(v, g) for v in value)
    if isinstance(value, torch.Tensor) and value.dtype in (torch.float32, torch.float64):
        return _nudge(value, g)
    if isinstance(value, float) and value != 0:
        return math.nextafter(value, math.inf if float(torch.rand((), generator=g)) < 0.5 else -math.inf)
    return value


class ModelOneUlpAway:
    """Replaces `build_model` so that every float32/float64 weight of a model is one ulp away from
    this machine's (the same ulp each time a model is built, as on one other machine)."""

    def __init__(self, build):
        self.build = build

    def __call__(self, seed, dtype, device="cpu", vocab_size=None):
        model = self.build(seed, dtype, device, vocab_size)
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for p in model.parameters():
                if p.dtype in (torch.float32, torch.float64):
                    p.copy_(_nudge(p.detach().cpu(), g).to(p.device))
        return model


def _mutant(bug: str) -> dict:
    sys.path.insert(0, str(CASES))
    try:
        from _impl import build
    finally:
        sys.path.remove(str(CASES))
    return build(bug)


def _lost(graded: dict) -> dict:
    return {name: output for name, (score, top, output) in graded.items() if score < top}


# ---- tests ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_one_ulp_on_every_stored_input_and_weight_changes_no_verdict(monkeypatch):
    from autograder.protocol import markers
    from autograder.trusted.checks import scoring

    perturbed = ModelOneUlpAway(markers.build_model)
    monkeypatch.setattr(markers, "build_model", perturbed)
    monkeypatch.setattr(scoring, "build_model", perturbed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        graded = grade_in_process(perturb=True)
        assert len(graded) >= 40 and not _lost(graded), _lost(graded)
        for bug, function, words in (("biased_std", "compute_group_normalized_rewards", "biased std"),
                                     ("per_microbatch_token_norm", "grpo_train_step", "per-micro-batch token"),
                                     ("entropy_log2", "compute_entropy", "log base 2")):
            lost = _lost(grade_in_process(_mutant(bug), (function,), perturb=True))
            assert any(words in output for output in lost.values()), (bug, lost)
    finally:
        torch.set_num_threads(threads)


def test_the_perturbation_moves_every_float_by_one_ulp_and_nothing_else():
    from autograder.trusted.grader import load_fixtures

    stored = load_fixtures()["compute_policy_gradient_loss/batch"]
    moved = one_ulp_away(stored, torch.Generator().manual_seed(0))
    before, after = stored["seeds"]["0"]["inputs"], moved["seeds"]["0"]["inputs"]
    changed = after["policy_log_probs"] != before["policy_log_probs"]
    assert changed.all()  # every element moved ...
    spacing = torch.nextafter(before["policy_log_probs"].abs(), torch.tensor(math.inf, dtype=torch.float64))
    assert ((after["policy_log_probs"] - before["policy_log_probs"]).abs()  # ... by at most one ulp
            <= spacing - before["policy_log_probs"].abs()).all()
    assert torch.equal(after["response_mask"], before["response_mask"])  # integers untouched
    assert moved["seeds"]["0"]["expected"] is stored["seeds"]["0"]["expected"]


@pytest.mark.slow
@pytest.mark.parametrize("capability", capabilities())
def test_the_reference_gets_full_marks_under_every_cpu_capability_and_thread_count(capability):
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    run = subprocess.run([sys.executable, __file__, "1", "2"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["capability"] == capability.upper()
    for threads, graded in report["grades"].items():
        assert len(graded) >= 40 and not _lost(graded), (capability, threads, _lost(graded))


def main(thread_counts: list[int]) -> None:
    """Grade the reference in-process with each thread count; print one JSON line (used above)."""
    grades = {}
    for threads in thread_counts:
        torch.set_num_threads(threads)
        grades[threads] = grade_in_process()
    print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "grades": grades}))


if __name__ == "__main__":
    main([int(n) for n in sys.argv[1:]])
