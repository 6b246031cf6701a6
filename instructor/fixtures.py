"""Regenerate the stored cases: `python -m instructor.fixtures`.

Makes the inputs of every stored case of every check and runs the reference (`course`) on them,
then writes autograder/fixtures/expected.pt:
    {case name: {"fingerprint": the case's definition, "seeds": {seed: {"inputs", "expected"}}}}
(and "diagnostics" beside "expected" where a case keeps values for its mistakes' diagnoses, so that
a stored-only grading, which never runs the reference, still names the mistake).
The inputs are stored, not remade at grading time, so the answer always belongs to exactly the
inputs the submission is fed, on any machine. tests/test_autograder_fixtures.py fails when the
stored cases drift from their definition or from the reference.
"""

from __future__ import annotations

import time

import torch

from autograder.trusted import checks  # noqa: F401  (registers the cases)
from autograder.trusted.core import CASES, case_fingerprint
from course.paths import FIXTURES


def compute_fixtures() -> dict:
    torch.manual_seed(0)
    table = {}
    for name, spec in CASES.items():
        seeds = {}
        for seed in spec.seeds:
            inputs = spec.make(seed)
            seeds[str(seed)] = {"inputs": inputs, "expected": spec.expected(inputs)}
            if spec.diagnostics is not None:
                seeds[str(seed)]["diagnostics"] = spec.diagnostics(inputs)
        table[name] = {"fingerprint": case_fingerprint(spec), "seeds": seeds}
    return table


def main() -> None:
    started = time.perf_counter()
    table = compute_fixtures()
    FIXTURES.parent.mkdir(parents=True, exist_ok=True)
    torch.save(table, FIXTURES)
    print(f"wrote {len(table)} cases to {FIXTURES} ({FIXTURES.stat().st_size / 1024:.0f} KiB) "
          f"in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
