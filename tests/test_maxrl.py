"""MaxRL's guard (`course.frontier.maxrl`): groups of one and groups whose mean is not positive."""

import pytest
import torch

from course.advantages import compute_group_normalized_rewards
from course.frontier.maxrl import maxrl_advantages, maxrl_train_arguments, refuse_negative_rewards


def test_guarded_maxrl_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0,  0.0, 0.0, 0.0, 0.0,  1.0, 1.0, 0.0, 1.0])
    # group 1: mean 1/4, (1 − 1/4)/(1/4) = 3 and −1 (prime-rl's [1, 0, 0, 0] -> [3, -1, -1, -1]);
    # group 2: nothing solved, 0; group 3: mean 3/4, 1/3 and −1
    assert maxrl_advantages(rewards, 4).tolist() == pytest.approx(
        [3, -1, -1, -1, 0, 0, 0, 0, 1 / 3, 1 / 3, -1, 1 / 3])
    graded, _ = compute_group_normalized_rewards(rewards, 4, advantage_normalizer="mean")
    assert torch.allclose(graded, maxrl_advantages(rewards, 4), rtol=1e-5)  # ε = 1e-6 apart


def test_a_group_of_one_is_reinforce_not_zero():
    rewards = torch.tensor([1.0, 0.0, 1.0])
    assert maxrl_advantages(rewards, 1).tolist() == [1.0, 0.0, 1.0]
    graded, _ = compute_group_normalized_rewards(rewards, 1, advantage_normalizer="mean")
    assert graded.tolist() == [0.0, 0.0, 0.0]  # the bug: (r − r)/(r + ε) learns nothing
    arguments = maxrl_train_arguments(1)
    via_graded, _ = compute_group_normalized_rewards(rewards, 1, **arguments)
    assert via_graded.tolist() == [1.0, 0.0, 1.0]


def test_a_mean_of_zero_divides_by_epsilon_without_the_guard():
    rewards = torch.tensor([-1.0, 1.0])
    graded, _ = compute_group_normalized_rewards(rewards, 2, advantage_normalizer="mean")
    assert graded.abs().max() == pytest.approx(1e6)  # ±1/ε
    with pytest.raises(ValueError, match="raw_rewards must be finite and >= 0"):
        maxrl_advantages(rewards, 2)
    checked = refuse_negative_rewards(lambda response, truth: {"reward": -0.5})
    with pytest.raises(ValueError, match="needs rewards >= 0"):
        checked("x", "y")


@pytest.mark.parametrize("rewards, group_size, argument", [
    (torch.ones(2, 2), 2, "raw_rewards"), (torch.ones(3), 2, "raw_rewards"),
    (torch.ones(2), 0, "group_size"), (torch.tensor([float("nan"), 1.0]), 2, "raw_rewards"),
])
def test_bad_input_raises_naming_the_argument(rewards, group_size, argument):
    with pytest.raises(ValueError, match=argument):
        maxrl_advantages(rewards, group_size)
