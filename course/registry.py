"""What is graded: the one registry that `course`, the autograder, the notebooks and the release
read.

Each stage is one notebook and one `course` module; each graded function belongs to one stage and
is worth the sum of its autograder checks' points (tests/test_registry.py holds the two equal, so a
check added without its points here fails a test). The same points are the nbgrader `points` of the
function's self-check cell (`instructor.release` sets them), so `nbgrader autograde` and `pytest
autograder` grade on one scale, with the same maximum on every device.
Written answers (`WRITTEN`: notebook 08's experiments, notebook 14's study report) are nbgrader's
manually graded cells: a person grades them in nbgrader's formgrader against the rubric in
solutions/, and `pytest autograder` does not, so its score is the autograded part of nbgrader's,
point for point.
The order of `REGISTRY` is the order a learner builds them in: a later stage may call the reference
of an earlier one, never its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    key: str  # "2_scoring": a results.json stage, a self-check id
    title: str
    notebook: str  # its file in solutions/ and notebooks/
    module: str  # where its graded functions live in `course`
    functions: dict[str, int]  # graded function -> points, in the notebook's order
    # support modules that hold part of this stage's reference (the autograder stubs them with it)
    helper_modules: tuple[str, ...] = ()
    # helpers of `module` that a later stage is given whole (notebook 07 calls
    # `calculate_loss_and_backward`, notebook 05's `compute_grpo_loss` stage 4's loss core): a
    # student edition keeps them where the stage is not revealed, and they call the learner's own
    # graded functions (`course.submissions.implementations.stand_in_for_stubs`)
    given: tuple[str, ...] = ()


REGISTRY: tuple[Stage, ...] = (
    Stage("1_tokenization", "Tokenization", "01_tokenization.ipynb", "course.tokenization",
          {"tokenize_prompt_and_output": 6}),
    Stage("2_scoring", "Log-probabilities and entropy", "02_scoring.ipynb", "course.scoring",
          {"compute_entropy": 4, "get_response_log_probs": 7}),
    Stage("3_advantages", "Rewards and group-normalized advantages",
          "03_advantages.ipynb", "course.advantages",
          {"compute_rollout_rewards": 3, "compute_group_normalized_rewards": 7}),
    Stage("4_losses", "Policy-gradient losses", "04_losses.ipynb", "course.losses",
          {"compute_policy_gradient_loss": 10}, given=("clipped_surrogate", "cispo_loss")),
    Stage("5_off_policy", "KL, truncated importance sampling and the full GRPO loss",
          "05_off_policy.ipynb", "course.off_policy",
          {"estimate_kl": 3, "truncated_importance_weights": 3, "compute_grpo_loss": 5}),
    Stage("6_aggregation", "Loss normalization", "06_aggregation.ipynb",
          "course.aggregation", {"aggregate_loss_across_microbatch": 6},
          given=("calculate_loss_and_backward",)),
    Stage("7_train_step", "The GRPO train step", "07_train_step.ipynb", "course.train_step",
          {"grpo_train_step": 12}),
)

# The same table, looked up the ways its readers need.
STAGE_NAMED: dict[str, Stage] = {stage.key: stage for stage in REGISTRY}
STAGES: dict[str, tuple[str, ...]] = {s.key: tuple(s.functions) for s in REGISTRY}  # in order
GRADED_FUNCTIONS: tuple[str, ...] = tuple(name for s in REGISTRY for name in s.functions)
STAGE_OF: dict[str, str] = {name: s.key for s in REGISTRY for name in s.functions}
HOME_MODULES: dict[str, str] = {name: s.module for s in REGISTRY for name in s.functions}
STAGE_MODULES: dict[str, str] = {module: s.key for s in REGISTRY for module in (s.module,
                                                                                *s.helper_modules)}
POINTS: dict[str, int] = {name: points for s in REGISTRY for name, points in s.functions.items()}

# The written answers: grade_id of each manually graded cell -> its nbgrader points (set by
# `instructor.release`, like the check cells'); the rubric is in the solution cell.
WRITTEN: dict[str, int] = {"08_exp_group_size_answer": 3, "08_exp_std_answer": 3,
                           "08_exp_clipping_answer": 3, "14_study_report": 6}
