"""compute_rollout_rewards and compute_group_normalized_rewards."""

import math

import pytest
import torch
from naive import group_normalized_rewards

from course import compute_group_normalized_rewards, compute_rollout_rewards


def _reward_fn(response, ground_truth):
    answer = float(response == ground_truth)
    fmt = float(response.isdigit())
    return {"reward": answer + 0.5 * fmt, "format_reward": fmt, "answer_reward": answer}


def test_rollout_rewards_hand_worked():
    # "3" vs "3": answer 1, format 1 -> 1.5;  "x" vs "3": 0, 0 -> 0;  "4" vs "3": 0, 1 -> 0.5
    rewards, meta = compute_rollout_rewards(_reward_fn, ["3", "x", "4"], ["3", "3", "3"])
    assert rewards.dtype == torch.float32 and rewards.shape == (3,)
    assert rewards.tolist() == [1.5, 0.0, 0.5]
    assert float(meta["reward_mean"]) == pytest.approx(2.0 / 3)
    assert float(meta["format_reward_mean"]) == pytest.approx(2.0 / 3)
    assert float(meta["answer_reward_mean"]) == pytest.approx(1.0 / 3)


def test_rollout_rewards_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="rollout_responses|repeated_ground_truths"):
        compute_rollout_rewards(_reward_fn, ["3", "4"], ["3"])


def test_group_normalized_hand_worked():
    # groups of 2: (1, 0) and (3, 3)
    # group 1: mean 0.5, unbiased std sqrt((0.25 + 0.25) / 1) = 0.7071067811865476
    #          advantages ±0.5 / (0.7071067811865476 + 1e-6) = ±0.7071057811879618
    # group 2: equal rewards -> std 0 -> advantages 0 / (0 + 1e-6) = 0
    raw = torch.tensor([1.0, 0.0, 3.0, 3.0], dtype=torch.float64)
    adv, meta = compute_group_normalized_rewards(raw, group_size=2)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert adv.shape == (4,) and adv.dtype == torch.float64
    torch.testing.assert_close(adv, torch.tensor([a, -a, 0.0, 0.0], dtype=torch.float64),
                               rtol=0, atol=1e-15)
    assert float(meta["advantage_mean"]) == pytest.approx(0.0, abs=1e-12)
    # std over the 4 advantages (unbiased): sqrt(2 a² / 3)
    assert float(meta["advantage_std"]) == pytest.approx(math.sqrt(2 * a * a / 3), rel=1e-9)


def test_group_normalized_baselines_and_normalizers_hand_worked():
    raw = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64)  # G = 3
    # group means 1/3 and 2/3; both unbiased stds sqrt((4/9 + 1/9 + 1/9) / 2) = 1/sqrt(3)
    cases = {
        # Dr. GRPO: subtract the mean, do not divide
        ("mean", "none"): [2 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3],
        # RFT: the raw reward is the weight
        ("none", "none"): [1.0, 0.0, 0.0, 1.0, 1.0, 0.0],
        # MaxRL: (r - mean) / mean: (2/3)/(1/3) = 2, (-1/3)/(1/3) = -1, (1/3)/(2/3) = 0.5, ...
        ("mean", "mean"): [2.0, -1.0, -1.0, 0.5, 0.5, -1.0],
        # raw / std = raw * sqrt(3)
        ("none", "std"): [math.sqrt(3), 0.0, 0.0, math.sqrt(3), math.sqrt(3), 0.0],
    }
    # advantage_eps=0 keeps the hand numbers exact (no std or mean here is 0)
    for (baseline, normalizer), expected in cases.items():
        adv, _ = compute_group_normalized_rewards(raw, 3, baseline=baseline, advantage_eps=0.0,
                                                  advantage_normalizer=normalizer)
        torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64), rtol=1e-12,
                                   atol=1e-12, msg=f"{baseline=} {normalizer=}")


@pytest.mark.parametrize("group_size", [2, 4, 8])
@pytest.mark.parametrize("baseline", ["mean", "none"])
@pytest.mark.parametrize("normalizer", ["std", "mean", "none"])
def test_group_normalized_matches_naive(group_size, baseline, normalizer):
    gen = torch.Generator().manual_seed(group_size)
    raw = torch.rand(16, generator=gen, dtype=torch.float64) + 0.1
    adv, _ = compute_group_normalized_rewards(raw, group_size, baseline, 1e-6, normalizer)
    expected = group_normalized_rewards(raw.tolist(), group_size, baseline, 1e-6, normalizer)
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_group_normalized_keeps_float32():
    adv, _ = compute_group_normalized_rewards(torch.tensor([0.0, 1.0, 1.0, 1.0]), 2)
    assert adv.dtype == torch.float32


@pytest.mark.parametrize("kwargs, argument", [
    ({"raw_rewards": torch.ones(2, 4), "group_size": 2}, "raw_rewards"),
    ({"raw_rewards": torch.ones(8), "group_size": 3}, "group_size"),
    ({"raw_rewards": torch.ones(8), "group_size": 0}, "group_size"),
    ({"raw_rewards": torch.ones(8), "group_size": 2, "baseline": "median"}, "baseline"),
    ({"raw_rewards": torch.ones(8), "group_size": 2, "advantage_normalizer": "max"},
     "advantage_normalizer"),
])
def test_group_normalized_bad_inputs_raise_naming_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        compute_group_normalized_rewards(**kwargs)
