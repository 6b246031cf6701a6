"""Stage 3's ungraded options (`course.advantages`): RLOO's baseline="leave_one_out" and
REINFORCE++'s advantage_normalizer="batch", against the numbers worked by hand there, a loop per
element, the identity RLOO = G/(G−1) · Dr. GRPO, the train step's micro-batching, two gloo ranks,
and `course.train`'s refusals (a learner's stage 3 need not take them)."""

import math
import os

import pytest
import torch
from naive import make_rollout_batch
from ranks import gloo_rank, run_ranks
from test_train_step import train_step

from course import grpo_train_step
from course.advantages import compute_group_normalized_rewards
from course.loop.step_arguments import advantage_option_problem
from course.loop.train import checked_train_step
from course.loop.train_config import ConfigError, TrainConfig, validate
from course.train import main

REWARDS = torch.tensor([1.0, 0, 0, 1, 1, 0, 0, 0], dtype=torch.float64)  # G = 4


def advantages(rewards, group_size, baseline, normalizer, eps=1e-6):
    return compute_group_normalized_rewards(rewards, group_size, baseline, eps, normalizer)[0]


def naive_rloo(rewards: list[float], group_size: int) -> list[float]:
    """Each reward minus the mean of the others of its group, one loop per sample."""
    result = []
    for i, reward in enumerate(rewards):
        start = i - i % group_size
        others = [rewards[j] for j in range(start, start + group_size) if j != i]
        result.append(reward - sum(others) / len(others))
    return result


def naive_reinforce_pp(rewards: list[float], group_size: int, group_baseline: bool,
                       eps: float = 1e-6) -> list[float]:
    values = list(rewards)
    if group_baseline:
        for start in range(0, len(values), group_size):
            mean = sum(rewards[start:start + group_size]) / group_size
            values[start:start + group_size] = [r - mean for r in rewards[start:start + group_size]]
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return [(v - mean) / (std + eps) for v in values]


def test_the_numbers_worked_by_hand():
    third, std = 1 / 3, math.sqrt(15 / 56)  # REINFORCE++: deviations 5/8 (x3), −3/8 (x5), n − 1 = 7
    cases = {("leave_one_out", "none"): [2 * third, -2 * third, -2 * third, 2 * third,
                                         1, -third, -third, -third],
             ("none", "batch"): [0.625 / std if r else -0.375 / std for r in REWARDS.tolist()],
             ("mean", "batch"): [1, -1, -1, 1, 1.5, -0.5, -0.5, -0.5]}
    for (baseline, normalizer), expected in cases.items():
        torch.testing.assert_close(advantages(REWARDS, 4, baseline, normalizer, eps=0.0),
                                   torch.tensor(expected, dtype=torch.float64))


def test_against_a_loop_on_random_rewards_and_rloo_is_dr_grpo_scaled():
    rewards = torch.rand(24, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for group_size in (2, 3, 6):
        rloo = advantages(rewards, group_size, "leave_one_out", "none")
        torch.testing.assert_close(rloo, torch.tensor(naive_rloo(rewards.tolist(), group_size),
                                                      dtype=torch.float64))
        # G/(G − 1) times Dr. GRPO's r − mean, which keeps r_i in its own baseline
        torch.testing.assert_close(rloo, advantages(rewards, group_size, "mean", "none")
                                   * group_size / (group_size - 1))
    for group_size, baseline in [(1, "none"), (4, "none"), (4, "mean"), (6, "mean")]:
        torch.testing.assert_close(
            advantages(rewards, group_size, baseline, "batch"),
            torch.tensor(naive_reinforce_pp(rewards.tolist(), group_size, baseline == "mean"),
                         dtype=torch.float64))
    floats = rewards.float()  # float32 in, float32 out
    assert advantages(floats, 4, "none", "batch").dtype == torch.float32


def test_only_the_batch_baseline_moves_a_group_of_equal_rewards():
    """All correct and all wrong: GRPO's and RLOO's advantages are 0; REINFORCE++'s batch
    baseline pushes the first up and the second down (±½ / √(2/7))."""
    rewards = torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0], dtype=torch.float64)
    assert advantages(rewards, 4, "mean", "std").eq(0).all()
    assert advantages(rewards, 4, "leave_one_out", "none").eq(0).all()
    assert advantages(rewards, 4, "mean", "batch").eq(0).all()
    side = 0.5 / math.sqrt(2 / 7)
    torch.testing.assert_close(advantages(rewards, 4, "none", "batch", eps=0.0),
                               torch.tensor([side] * 4 + [-side] * 4, dtype=torch.float64))


@pytest.mark.parametrize("rewards, group_size, baseline, normalizer, argument", [
    (REWARDS, 1, "leave_one_out", "none", "group_size"),
    (torch.ones(1), 1, "none", "batch", "raw_rewards"),
    (REWARDS, 3, "none", "batch", "group_size"),
    (REWARDS, 4, "loo", "none", "baseline"),
    (REWARDS, 4, "mean", "whiten", "advantage_normalizer"),
])
def test_bad_input_raises_naming_the_argument(rewards, group_size, baseline, normalizer, argument):
    with pytest.raises(ValueError, match=argument):
        advantages(rewards, group_size, baseline, normalizer)


@pytest.mark.usefixtures("single_thread")
def test_the_batch_statistics_do_not_depend_on_the_micro_batches(make_model, tokenizer):
    """K = 1, 3 and B micro-batches make one update: the train step's, on rewards whitened over
    the batch beforehand (an independent route: the step then keeps them as they are)."""
    batch = make_rollout_batch()
    whitened = naive_reinforce_pp(batch["rewards"], 4, group_baseline=False)
    expected, _, _ = train_step(make_model(torch.float64), tokenizer,
                                {**batch, "ground_truths": [repr(w) for w in whitened]}, 1,
                                baseline="none", advantage_normalizer="none")
    assert max(g.abs().max() for g in expected) > 1e-4  # the check is not vacuous
    for gas in (1, 3, len(batch["prompts"])):
        update, _, _ = train_step(make_model(torch.float64), tokenizer, batch, gas,
                                  baseline="none", advantage_normalizer="batch")
        for got, want in zip(update, expected):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def _rank_rewards(rank: int) -> torch.Tensor:  # unequal shares: rank 0 two groups, rank 1 one
    rewards = torch.rand(12, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    return rewards[:8] if rank == 0 else rewards[8:]


def _worker(rank: int, port: int, directory: str) -> None:
    def body():
        result = advantages(_rank_rewards(rank), 4, "mean", "batch")
        torch.save(result, os.path.join(directory, f"rank{rank}.pt"))
    gloo_rank(rank, port, 2, body)


@pytest.mark.distributed
def test_two_ranks_whiten_over_the_whole_batch(tmp_path):
    run_ranks(_worker, str(tmp_path), world_size=2, seconds=120)
    got = torch.cat([torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)])
    whole = torch.cat([_rank_rewards(0), _rank_rewards(1)])
    torch.testing.assert_close(got, advantages(whole, 4, "mean", "batch"))
    assert not torch.allclose(got[8:], advantages(_rank_rewards(1), 4, "mean", "batch"))


@pytest.mark.parametrize("fields, field", [
    ({"baseline": "leave_one_out", "group_size": 1, "advantage_normalizer": "none"}, "group_size"),
    ({"advantage_normalizer": "batch", "group_size": 1, "prompts_per_step": 1}, "advantage_norm"),
])
def test_a_run_that_cannot_compute_the_option_is_refused(fields, field):
    with pytest.raises(ConfigError, match=field):
        validate(TrainConfig(**fields), world_size=1)


def test_the_flags_are_usage_errors_naming_them(tmp_path, capsys):
    for flags, flag in [(["--baseline", "leave_one_out", "--group-size", "1",
                          "--advantage-normalizer", "none"], "--group-size"),
                        (["--baseline", "rloo"], "--baseline"),
                        (["--advantage-normalizer", "reinforce_pp"], "--advantage-normalizer")]:
        with pytest.raises(SystemExit) as exit_info:
            main(["--out", str(tmp_path / "run"), *flags])
        error = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"argument {flag}:" in error, error
        assert "Traceback" not in error


def _rejecting(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
               advantage_normalizer="std"):
    """A graded stage 3 that knows the graded names only (full marks)."""
    if baseline not in ("mean", "none") or advantage_normalizer not in ("std", "mean", "none"):
        raise ValueError("unknown baseline or normalizer")
    return compute_group_normalized_rewards(raw_rewards, group_size, baseline, advantage_eps,
                                            advantage_normalizer)


def _per_rank(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
              advantage_normalizer="std"):
    """Takes every name, but "batch" on the group: a wrong answer, not an error."""
    normalizer = "std" if advantage_normalizer == "batch" else advantage_normalizer
    return _rejecting(raw_rewards, group_size, "mean" if baseline == "leave_one_out"
                      else baseline, advantage_eps, normalizer)


def test_a_learners_stage_three_without_the_option_is_refused_by_name():
    rloo = TrainConfig(baseline="leave_one_out", advantage_normalizer="none")
    batch = TrainConfig(baseline="none", advantage_normalizer="batch")
    assert advantage_option_problem(_rejecting, TrainConfig(), 1) is None  # GRPO: graded names
    assert advantage_option_problem(compute_group_normalized_rewards, rloo, 1) is None
    assert advantage_option_problem(compute_group_normalized_rewards, batch, 1) is None
    field, why = advantage_option_problem(_rejecting, rloo, 1)
    assert field == "baseline" and why.startswith("leave_one_out is") and "ValueError" in why
    field, why = advantage_option_problem(_per_rank, batch, 1)
    assert field == "advantage_normalizer" and "not the reference's" in why
    field, why = advantage_option_problem(compute_group_normalized_rewards, batch, 2)
    assert field == "advantage_normalizer" and "one process" in why
    # what `python -m course.train --notebooks DIR` checks before anything loads
    learners = {"grpo_train_step": grpo_train_step, "compute_group_normalized_rewards": _rejecting}
    with pytest.raises(ConfigError, match="baseline leave_one_out is an optional"):
        checked_train_step(rloo, learners, world_size=1)
    assert checked_train_step(TrainConfig(), learners, world_size=1) is grpo_train_step


def test_without_the_reference_a_learners_stage_three_need_only_run(monkeypatch):
    """A student edition that has not revealed stage 3: its reference raises StageNotRevealed (a
    RuntimeError), so the learner's answer cannot be compared, only run."""
    def not_revealed(*args, **kwargs):
        raise RuntimeError("course.compute_group_normalized_rewards is not revealed yet")

    monkeypatch.setattr("course.loop.step_arguments.compute_group_normalized_rewards",
                        not_revealed)
    rloo = TrainConfig(baseline="leave_one_out", advantage_normalizer="none")
    assert advantage_option_problem(_per_rank, rloo, 1) is None
    assert advantage_option_problem(_rejecting, rloo, 1)[0] == "baseline"
