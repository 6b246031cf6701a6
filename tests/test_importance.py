"""IS-correction modes (course.loop.importance): hand-worked weights, an independent loop implementation,
and the update through the graded train step equal to the naive full-batch loss with those weights,
for gradient_accumulation_steps 1..4 and B (float64, SGD(lr=1), as tests/test_train_step.py)."""

import math

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

from course.loop.importance import IS_LEVELS, IS_MODES, as_sampler_log_probs, importance_weights

pytestmark = pytest.mark.usefixtures("single_thread")
CAP = 1.5


def naive_weights(old, sampler, mask, level, mode, cap):
    """Row by row, token by token, in Python floats."""
    weights = torch.zeros_like(old, dtype=torch.float64)
    for i in range(old.shape[0]):
        positions = [t for t in range(old.shape[1]) if mask[i, t]]
        ratios = [math.exp(float(old[i, t] - sampler[i, t])) for t in positions]
        if level == "sequence":
            ratios = [math.prod(ratios)] * len(ratios)
        elif level == "geometric":
            ratios = [math.prod(ratios) ** (1 / len(ratios))] * len(ratios) if ratios else []
        for t, rho in zip(positions, ratios):
            weights[i, t] = min(rho, cap) if mode == "truncate" else (rho if rho <= cap else 0.0)
    return weights


def test_hand_worked_weights():
    # one row, ratios e^0.2, e^-0.1, e^0.5 (log-sum 0.6, mean 0.2); cap 1.5 (log 0.405)
    old = torch.tensor([[0.2, -0.1, 0.5, 9.0]], dtype=torch.float64)
    sampler = torch.zeros_like(old)
    mask = torch.tensor([[1, 1, 1, 0]])
    expect = {("token", "truncate"): [math.exp(0.2), math.exp(-0.1), 1.5, 0],
              ("token", "mask"): [math.exp(0.2), math.exp(-0.1), 0, 0],
              ("sequence", "truncate"): [1.5, 1.5, 1.5, 0],          # e^0.6 = 1.82 > 1.5
              ("sequence", "mask"): [0, 0, 0, 0],
              ("geometric", "truncate"): [math.exp(0.2)] * 3 + [0],  # e^0.2 = 1.22
              ("geometric", "mask"): [math.exp(0.2)] * 3 + [0]}
    for (level, mode), values in expect.items():
        got = importance_weights(old, sampler, mask, level, mode, CAP)
        torch.testing.assert_close(got, torch.tensor([values], dtype=torch.float64), rtol=1e-15, atol=0)


@pytest.mark.parametrize("mode", IS_MODES)
@pytest.mark.parametrize("level", IS_LEVELS)
def test_weights_equal_the_loop_implementation(make_model, tokenizer, level, mode):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    sampler = make_old_log_probs(model, batch, tokenizer, seed=2, scale=0.3)
    mask = tokenize(batch["prompts"], batch["responses"], tokenizer)["response_mask"]
    got = importance_weights(old, sampler, mask, level, mode, CAP)
    expected = naive_weights(old, sampler, mask, level, mode, CAP)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    assert (expected == 0).logical_and(mask.bool()).any() == (mode == "mask")  # the cap acts here


def test_the_encoded_sampler_log_probs_reproduce_the_weights():
    old = torch.tensor([[-1.0, -2.5, -0.3, 0.0]], dtype=torch.float64)
    weights = torch.tensor([[0.5, 0.0, 1.5, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0]])
    sampler = as_sampler_log_probs(old, weights, mask)
    applied = torch.exp(torch.clamp(old - sampler, max=math.log(CAP))) * mask  # what the train step does
    torch.testing.assert_close(applied, weights, rtol=1e-15, atol=0)
    with pytest.raises(ValueError, match="weights"):
        as_sampler_log_probs(old, -weights, mask)


@pytest.mark.parametrize("mode", ["token", "sequence"])
@pytest.mark.parametrize("level, is_mode", [("token", "mask"), ("sequence", "truncate"),
                                            ("sequence", "mask"), ("geometric", "truncate")])
def test_update_with_is_weights_is_the_full_batch_update_for_every_accumulation(
        make_model, tokenizer, level, is_mode, mode):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    sampler = make_old_log_probs(model, batch, tokenizer, seed=2, scale=0.3)
    mask = tokenize(batch["prompts"], batch["responses"], tokenizer)["response_mask"]
    weights = naive_weights(old, sampler, mask, level, is_mode, CAP)
    loss = full_batch_loss(model, tokenizer, batch, "grpo", mode, old, 0.2, 40.0, normalizer="none",
                           token_weights=weights)
    expected = [-g for g in gradient(model, [loss])]
    encoded = as_sampler_log_probs(old, importance_weights(old, sampler, mask, level, is_mode, CAP), mask)
    for gas in (1, 2, 3, 4, len(batch["prompts"])):
        update, _, _ = train_step(make_model(torch.float64), tokenizer, batch, gas,
                                  **_arguments("grpo", mode, old), sampler_log_probs=encoded, tis_cap=CAP)
        assert relative_difference(update, expected) < 1e-10, f"{gas=}"
    # and the weights matter: without them the update is another one
    plain = [-g for g in gradient(model, [full_batch_loss(model, tokenizer, batch, "grpo", mode, old, 0.2,
                                                          40.0, normalizer="none")])]
    assert relative_difference(plain, expected) > 1e-3


@pytest.mark.parametrize("kwargs, match", [(dict(level="row"), "level"), (dict(mode="clip"), "mode"),
                                           (dict(cap=0.0), "cap"), (dict(cap=float("inf")), "cap")])
def test_bad_arguments_name_themselves(kwargs, match):
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=match):
        importance_weights(x, x, torch.ones(1, 2), **kwargs)
