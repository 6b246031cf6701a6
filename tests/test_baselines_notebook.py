"""The optional notebook `solutions/12_baselines.ipynb`, beyond what every notebook is
held to in tests/test_notebooks.py:

- its check cell passes the solution and stops two wrong weights (expert iteration divided by every
  token of the step; GRPO's std without Bessel's correction);
- the recorded runs it reads are whole: three methods and seven losses, seeds 0, 1 and 2 each;
- slow: it runs headless from those recordings (its rerun trains a few steps), and every decimal
  number in the prose that reads the measurements is one that a cell printed.
"""

from __future__ import annotations

import json
import re
import shutil

import nbformat
import pytest
from test_notebooks import error_outputs, execute, kernel_environment  # noqa: F401

from course.paths import CHECKPOINTS, SOLUTIONS

NOTEBOOK = SOLUTIONS / "12_baselines.ipynb"
READING = ("bv_baselines_read", "bv_variants_read", "bv_question")  # prose quoting measurements


def sources() -> dict[str, str]:
    return {cell.id: cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells}


def run_check(weights_source: str) -> None:
    """The setup cell, a `rollout_weights` definition and the check cell, in one namespace."""
    cells = sources()
    namespace: dict = {}
    for source in (cells["bv_setup"], weights_source, cells["bv_check"]):
        exec(compile(source, "cell", "exec"), namespace)


WRONG = """
def rollout_weights(rewards, lengths, group_size):
    B = len(rewards)
    ei = [r / ({kept}) for r in rewards]
    grpo = []
    for start in range(0, B, group_size):
        group = rewards[start:start + group_size]
        mean = sum(group) / group_size
        std = (sum((r - mean) ** 2 for r in group) / ({bessel})) ** 0.5
        grpo += [(r - mean) / (std + 1e-6) for r in group]
    return ei, [a / (B * n) for a, n in zip(grpo, lengths)]
"""
KEPT = "sum(n for q, n in zip(rewards, lengths) if q == 1)"
EI_OVER_ALL_TOKENS = WRONG.format(kept="sum(lengths)", bessel="group_size - 1")
BIASED_STD = WRONG.format(kept=KEPT, bessel="group_size")
RIGHT = WRONG.format(kept=KEPT, bessel="group_size - 1")  # the wrong ones' control


def test_the_check_passes_the_solution_and_stops_wrong_weights(capsys):
    for right in (sources()["bv_weights_solution"], RIGHT):
        run_check(right)
        assert "20 random steps agree with the course's losses" in capsys.readouterr().out
    for wrong in (EI_OVER_ALL_TOKENS, BIASED_STD):
        with pytest.raises(AssertionError):
            run_check(wrong)


def test_the_recordings_it_reads_are_whole():
    baselines = json.loads((CHECKPOINTS / "baselines.json").read_text())
    assert {m: [r["seed"] for r in runs] for m, runs in baselines["runs"].items()} == {
        m: [0, 1, 2] for m in ("sft", "expert_iteration", "grpo")}
    assert {r["curve"][-1]["step"] for runs in baselines["runs"].values() for r in runs} == {50}
    curves = json.loads((CHECKPOINTS / "loss_curves.json").read_text())
    seen = sorted((r["variant"], r["seed"]) for r in curves["runs"])
    variants = ("cispo", "dapo", "dppo", "gmpo", "grpo", "gspo", "sapo")
    assert seen == [(v, s) for v in variants for s in (0, 1, 2)]
    assert curves["config"]["updates_per_rollout"] == 4  # where the clips act


@pytest.mark.slow
@pytest.mark.usefixtures("kernel_environment")
def test_it_runs_headless_and_its_prose_quotes_printed_numbers(tmp_path, monkeypatch):
    shutil.copytree(SOLUTIONS, tmp_path / "solutions")  # beside its siblings, nothing into the repo
    notebook = nbformat.read(tmp_path / "solutions" / NOTEBOOK.name, as_version=4)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    seconds = execute(notebook, tmp_path / "solutions")
    print(f"\n{NOTEBOOK.name}: executed in {seconds:.1f} s")
    assert error_outputs(notebook) == []
    printed = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []))
    images = sum("image/png" in out.get("data", {}) for cell in notebook.cells
                 if cell.cell_type == "code" for out in cell.get("outputs", []))
    assert images == 2, images
    quoted = [n for cell in notebook.cells if cell.id in READING
              for n in re.findall(r"\d+\.\d+", cell.source)]
    assert quoted and [n for n in quoted if n not in printed] == []
    rerun = next(c for c in notebook.cells if c.id == "bv_rerun")
    lines = "".join(out.get("text", "") for out in rerun.outputs).splitlines()
    assert [line.split(":")[0].strip() for line in lines] == ["SFT", "expert iteration", "GRPO"]
