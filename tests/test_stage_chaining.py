"""Whose earlier stages a graded later stage runs on.

An official grade (the full package) runs a student's train step on the reference of every earlier
stage, so a bug in stage 3 costs points in stage 3 only. In a student edition, where stage 3's
reference is a stub, the train step runs on the student's own stage 3 (the worker puts it where the
stub stood: `course.submissions.implementations.stand_in_for_stubs`), so the practice grade of stage 7 reflects
the code the student would really train with.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.api import grade
from autograder.trusted.isolation import sandbox_problem
from course.paths import ROOT as REPO_ROOT
from instructor.edition import build_edition

needs_sandbox = pytest.mark.skipif(sandbox_problem(REPO_ROOT) is not None, reason="no bubblewrap sandbox here")

# Stage 3 written with a sign error: every reward negated, so every advantage and update flips.
# Written differently from the reference, so that the copy detector does not take it for one.
NEGATED_REWARDS = '''
def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
    """Rewards, negated by mistake."""
    if len(rollout_responses) != len(repeated_ground_truths) or not rollout_responses:
        raise ValueError("rollout_responses and repeated_ground_truths: lengths differ or empty")
    rows = [reward_fn(r, t) for r, t in zip(rollout_responses, repeated_ground_truths)]
    means = {}
    for key in ("reward", "format_reward", "answer_reward"):
        means[key + "_mean"] = sum(float(row[key]) for row in rows) / len(rows)
    return -torch.tensor([float(row["reward"]) for row in rows], dtype=torch.float32), means
'''
TRAIN_STEP_VALUE = "grpo_train_step: full-batch update matches the reference (sequence, token, constant, grpo-clip)"
FULL_BATCH = "grpo_train_step and full"  # `-k`: TRAIN_STEP_VALUE alone, all that the first two runs read


def _learner(folder: Path) -> Path:
    """The solution notebooks, with notebook 03's compute_rollout_rewards redefined wrongly."""
    folder.mkdir(parents=True, exist_ok=True)
    for notebook in sorted((REPO_ROOT / "solutions").glob("0[1-7]_*.ipynb")):
        shutil.copyfile(notebook, folder / notebook.name)
    path = folder / "03_advantages.ipynb"
    document = json.loads(path.read_text(encoding="utf-8"))
    document["cells"].append({"cell_type": "code", "execution_count": None, "id": "negated",
                              "metadata": {}, "outputs": [], "source": NEGATED_REWARDS})
    path.write_text(json.dumps(document), encoding="utf-8")
    return folder


def _verdicts(results: dict) -> dict[str, str]:
    tests = results["tests"] if "tests" in results else results["results"].values()  # results.json or api
    return {test["name"]: test["status"] for test in tests}


@pytest.mark.slow
@needs_sandbox
def test_an_official_grade_runs_a_later_stage_on_the_reference_of_earlier_ones(tmp_path):
    results = grade(str(_learner(tmp_path / "notebooks")), functions=["compute_rollout_rewards", "grpo_train_step"],
                    seed=1, allow_reference=True, official=True)
    verdicts = _verdicts(results)
    assert verdicts["compute_rollout_rewards: rewards (float32) and the three metadata means match"] == "failed", verdicts
    assert verdicts[TRAIN_STEP_VALUE] == "passed"  # stage 7 is not charged for stage 3's bug
    train_step = [status for name, status in verdicts.items() if name.startswith("grpo_train_step")]
    assert train_step and set(train_step) == {"passed"}


@pytest.mark.slow
@needs_sandbox
def test_a_student_edition_runs_a_later_stage_on_the_students_own_earlier_ones(tmp_path):
    edition = tmp_path / "edition"
    build_edition(edition, revealed=("1_tokenization", "2_scoring"))
    shutil.rmtree(edition / "notebooks")
    _learner(edition / "notebooks")
    results_path = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "autograder", "-q", "-p", "no:cacheprovider",
                          "--allow-reference", "--seed", "1", "--results", str(results_path),
                          "-k", FULL_BATCH], cwd=edition, capture_output=True, text=True, timeout=900)
    assert results_path.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads(results_path.read_text())
    verdicts = _verdicts(results)
    assert results["extra_data"]["practice"] is True
    assert verdicts[TRAIN_STEP_VALUE] == "failed", verdicts  # the student's negated rewards ran
    output = next(t["output"] for t in results["tests"] if t["name"] == TRAIN_STEP_VALUE)
    assert "StageNotRevealed" not in output  # not a stub: the student's own stage 3

    # Stage 3 not written yet (the release's blank notebook): the stub's message names the notebook.
    shutil.copyfile(REPO_ROOT / "notebooks" / "03_advantages.ipynb",
                    edition / "notebooks" / "03_advantages.ipynb")
    subprocess.run([sys.executable, "-m", "pytest", "autograder", "-q", "-p", "no:cacheprovider",
                    "--allow-reference", "--seed", "1", "--results", str(results_path),
                    "-k", FULL_BATCH], cwd=edition, capture_output=True, text=True, timeout=900)
    blank = json.loads(results_path.read_text())
    output = next(t["output"] for t in blank["tests"] if t["name"] == TRAIN_STEP_VALUE)
    assert "not revealed yet" in output and "03_advantages.ipynb" in output, output

    # The same notebooks with stage 3 fixed (the solution's): every train-step check passes there.
    shutil.copyfile(REPO_ROOT / "solutions" / "03_advantages.ipynb",
                    edition / "notebooks" / "03_advantages.ipynb")
    subprocess.run([sys.executable, "-m", "pytest", "autograder", "-q", "-p", "no:cacheprovider",
                    "--allow-reference", "--seed", "1", "--results", str(results_path),
                    "-k", "grpo_train_step"], cwd=edition, capture_output=True, text=True, timeout=900)
    fixed = _verdicts(json.loads(results_path.read_text()))
    assert {status for status in fixed.values()} == {"passed"}, fixed
