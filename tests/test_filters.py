"""Dynamic sampling and overlong handling (course.loop.filters): hand-worked cases, and the update through
the graded train step equal to the naive full-batch update of what the filter keeps, for
gradient_accumulation_steps 1..4 and B (float64, SGD(lr=1), as tests/test_train_step.py).
Under two gloo ranks: tests/test_filters_distributed.py."""

import pytest
import torch
from naive import (
    full_batch_loss,
    gradient,
    make_old_log_probs,
    make_rollout_batch,
    relative_difference,
    tokenize,
)
from test_train_step import _arguments, train_step

from course.loop.filters import (
    informative_groups,
    keep_groups,
    regroup_over_ranks,
    soft_overlong_penalty,
    truncated_rows,
    with_soft_overlong_penalty,
)
from course.loop.importance import as_sampler_log_probs
from course.loop.rollout import RolloutBatch

pytestmark = pytest.mark.usefixtures("single_thread")


def test_constant_groups_are_found_with_a_tolerance():
    # float32 noise: a reward shaped as 0.6 + 0.1 in float32 is not float32(0.7); the group is constant
    f32 = torch.float32
    shaped = float(torch.tensor(0.6, dtype=f32) + torch.tensor(0.1, dtype=f32))
    noisy = [float(torch.tensor(0.7, dtype=f32)), shaped, shaped, shaped]
    assert len(set(noisy)) == 2 and torch.tensor(noisy).std() > 0  # a std > 0 test would keep it
    assert informative_groups(noisy + [0.0, 1.0, 0.0, 0.0], 4) == [False, True]
    assert informative_groups(noisy, 4, tolerance=0.0) == [True]
    with pytest.raises(ValueError, match="group_size"):
        informative_groups([1.0, 2.0, 3.0], 2)


def _rollouts(batch) -> RolloutBatch:
    return RolloutBatch(batch["prompts"], batch["responses"], batch["ground_truths"],
                        [torch.zeros(1)] * len(batch["prompts"]), None)


def test_keep_groups_keeps_whole_groups_in_order_and_one_process_regroups_to_itself():
    batch = make_rollout_batch(zero_advantage_group=True)  # groups 0, 1 informative, 2 constant
    keep = informative_groups(batch["rewards"], 4)
    assert keep == [True, True, False]
    kept = keep_groups(_rollouts(batch), keep, 4)
    assert kept.responses == batch["responses"][:8] and kept.repeated_ground_truths == batch["ground_truths"][:8]
    assert regroup_over_ranks(kept, 4) == (kept, 2)


def test_dropping_the_constant_group_is_the_update_of_the_informative_groups(make_model, tokenizer):
    """With the constant group the token-mode denominator N counts its 8 tokens: the step shrinks.
    Dynamic sampling removes it, and the update is the one of the informative groups alone."""
    full = make_rollout_batch(zero_advantage_group=True)
    kept = keep_groups(_rollouts(full), informative_groups(full["rewards"], 4), 4)
    batch = {"prompts": kept.repeated_prompts, "responses": kept.responses,
             "ground_truths": kept.repeated_ground_truths, "rewards": full["rewards"][:8], "group_size": 4}
    model = make_model(torch.float64)
    expected = [-g for g in gradient(model, [full_batch_loss(model, tokenizer, batch, "none", "token",
                                                             normalizer="none")])]
    for gas in (1, 2, 3, 4, 8):
        update, _, _ = train_step(make_model(torch.float64), tokenizer, batch, gas, **_arguments("none", "token", None))
        assert relative_difference(update, expected) < 1e-10, f"{gas=}"
    diluted, _, _ = train_step(make_model(torch.float64), tokenizer, full, 1, **_arguments("none", "token", None))
    assert relative_difference(diluted, expected) > 0.1  # N = 38 + the constant group's tokens


def test_soft_overlong_penalty_is_dapo_equation_13():
    # L = 10, L_c = 4: no penalty up to 6 tokens, then −1/4 per token, −1 past L
    assert [soft_overlong_penalty(n, 10, 4) for n in (0, 6, 7, 8, 10, 11)] == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]
    with pytest.raises(ValueError, match="buffer"):
        soft_overlong_penalty(3, 10, 11)


def test_the_soft_penalty_counts_the_tokens_the_train_step_sees(tokenizer):
    shaped = with_soft_overlong_penalty(lambda r, t: {"reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0},
                                        tokenizer, max_length=4, buffer=2)
    assert shaped("12", "x")["reward"] == 1.0          # 2 tokens
    assert shaped("123<eos>", "x")["reward"] == 0.0    # 4 tokens, <eos> one of them: 1 − 1
    assert shaped("123", "x")["answer_reward"] == 1.0  # only the reward is shaped


def test_truncated_rows_are_those_without_eos():
    rollouts = RolloutBatch(["p"] * 3, ["12<eos>", "123", "<eos>"], ["1"] * 3, [torch.zeros(1)] * 3)
    assert truncated_rows(rollouts, "<eos>") == [False, True, False]


@pytest.mark.parametrize("mode", ["sequence", "token", "constant"])
def test_overlong_filter_is_the_update_without_the_truncated_rows_pg_term(make_model, tokenizer, mode):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    mask = tokenize(batch["prompts"], batch["responses"], tokenizer)["response_mask"]
    truncated = torch.tensor([[r in (1, 6)] for r in range(8)])  # two rows cut at max_new_tokens
    weights = mask.double() * ~truncated
    expected = [-g for g in gradient(model, [full_batch_loss(model, tokenizer, batch, "grpo", mode, old, 0.2, 40.0,
                                                             normalizer="none", token_weights=weights)])]
    encoded = as_sampler_log_probs(old, weights, mask)
    for gas in (1, 2, 3, 4, 8):
        update, _, _ = train_step(make_model(torch.float64), tokenizer, batch, gas, **_arguments("grpo", mode, old),
                                  sampler_log_probs=encoded, tis_cap=2.0)
        assert relative_difference(update, expected) < 1e-10, f"{gas=}"
