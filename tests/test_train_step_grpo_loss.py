"""grpo_train_step with stage 5's loss (`grpo_loss`: open-instruct's DAPO and CISPO), as exact as stage 4's.

With SGD(lr=1) the update is −∇L of the naive objective (naive.full_batch_loss: token by token, float64)
with decoupled bounds ε_low = 0.2 and ε_high = 0.28 (DAPO's clip-higher, Yu et al. 2025, arXiv
2503.14476), for every normalization and accumulation split, with and without the KL term and the TIS
weights. With ε_high = ε_low the update is stage 4's (grpo, cispo) to rounding. The clip-higher is not
vacuous here: some ratios of this batch lie in (1.2, 1.28], where it lets a gradient through that the
symmetric clip removes.
"""

import types

import pytest
import torch
from naive import (
    full_batch_loss,
    gradient,
    group_normalized_rewards,
    make_old_log_probs,
    make_rollout_batch,
    relative_difference,
    response_log_probs,
    reward_fn,
    tokenize,
)

from course import grpo_train_step
from course.off_policy import GRPOLossConfig

pytestmark = pytest.mark.usefixtures("single_thread")

LOW, HIGH = 0.2, 0.28
CONSTANT = 40.0
KL_BETA, TIS_CAP = 0.5, 1.2


def sgd_step(model, tokenizer, batch, gas, **kwargs):
    """One grpo_train_step with SGD(lr=1) and Dr. GRPO advantages; (update, metadata)."""
    before = [p.detach().clone() for p in model.parameters()]
    _, metadata = grpo_train_step(model, tokenizer, torch.optim.SGD(model.parameters(), lr=1.0), gas, None,
                                  reward_fn, batch["prompts"], batch["responses"], batch["ground_truths"],
                                  batch["group_size"], advantage_normalizer="none", **kwargs)
    return [p.detach() - b for p, b in zip(model.parameters(), before)], metadata


def normalization(mode: str) -> dict:
    return {"loss_normalization": mode, "normalization_constant": CONSTANT if mode == "constant" else None}


def penalties(model, batch, tokenizer, kl: bool, tis: bool) -> dict:
    """Reference and sampler log-probs: the model's own, perturbed (as in test_train_step.py)."""
    found = {}
    if kl:
        found["ref_log_probs"] = make_old_log_probs(model, batch, tokenizer, seed=1, scale=0.5)
    if tis:
        found.update(sampler_log_probs=make_old_log_probs(model, batch, tokenizer, seed=2), tis_cap=TIS_CAP)
    return found


@pytest.mark.parametrize("loss_fn, mode, kl, tis", [
    ("dapo", "token", False, False), ("dapo", "sequence", True, True), ("dapo", "constant", True, False),
    ("cispo", "token", False, True), ("cispo", "sequence", True, False),
])
def test_update_is_the_full_batch_gradient_for_every_split(make_model, tokenizer, loss_fn, mode, kl, tis):
    batch = make_rollout_batch(zero_advantage_group=kl)  # the zero group: KL gradient only
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    extra = penalties(model, batch, tokenizer, kl, tis)
    loss = full_batch_loss(model, tokenizer, batch, loss_fn, mode, old, LOW, CONSTANT, normalizer="none",
                           kl_beta=KL_BETA if kl else 0.0, kl_estimator="k3", clip_higher=HIGH, **extra)
    expected = [-g for g in gradient(model, [loss])]
    assert max(g.abs().max() for g in expected) > 1e-4  # not vacuous
    config = GRPOLossConfig(loss_fn, clip_lower=LOW, clip_higher=HIGH, kl_estimator="k3",
                            beta=KL_BETA if kl else 0.0)
    for gas in (1, 2, 3, 4):
        update, metadata = sgd_step(make_model(torch.float64), tokenizer, batch, gas, old_log_probs=old,
                                    grpo_loss=config, **normalization(mode), **extra)
        assert relative_difference(update, expected) < 1e-10, f"{gas=}"
        assert ("kl_mean" in metadata) == kl and ("tis_weight_mean" in metadata) == tis


@pytest.mark.parametrize("loss_fn, pg_method", [("dapo", "grpo"), ("cispo", "cispo")])
def test_equal_bounds_give_stage_4s_update(make_model, tokenizer, loss_fn, pg_method):
    batch = make_rollout_batch()
    old = make_old_log_probs(make_model(torch.float64), batch, tokenizer)
    stage_4, meta_4 = sgd_step(make_model(torch.float64), tokenizer, batch, 2, pg_method=pg_method,
                               old_log_probs=old, cliprange=LOW, **normalization("token"))
    stage_5, meta_5 = sgd_step(make_model(torch.float64), tokenizer, batch, 2, old_log_probs=old,
                               grpo_loss=GRPOLossConfig(loss_fn, clip_lower=LOW, clip_higher=LOW),
                               **normalization("token"))
    assert relative_difference(stage_5, stage_4) < 1e-12
    for key in ("clip_fraction", "importance_ratio_mean", "off_policy_loss_mean"):
        assert float(meta_5[key]) == pytest.approx(float(meta_4[key]), rel=1e-12, abs=1e-15), key


def test_clip_higher_lets_the_gradient_through_above_1_2(make_model, tokenizer):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer, seed=5)  # 2 of 19 rewarded tokens in (1.2, 1.28]
    tokens = tokenize(batch["prompts"], batch["responses"], tokenizer)
    mask = tokens["response_mask"].bool()
    with torch.no_grad():
        ratio = torch.exp(response_log_probs(model, tokens["input_ids"], tokens["labels"]) - old)  # (B, T)
    advantages = torch.tensor(group_normalized_rewards(batch["rewards"], batch["group_size"], normalizer="none"),
                              dtype=torch.float64)[:, None]  # (B, 1)
    between = mask & (advantages > 0) & (ratio > 1 + LOW) & (ratio <= 1 + HIGH)
    assert between.any()  # tokens the symmetric clip stops and the clip-higher does not
    clipped = mask & (((advantages > 0) & (ratio > 1 + HIGH)) | ((advantages < 0) & (ratio < 1 - LOW)))
    symmetric, _ = sgd_step(make_model(torch.float64), tokenizer, batch, 1, old_log_probs=old,
                            grpo_loss=GRPOLossConfig("dapo", LOW, LOW), **normalization("token"))
    higher, metadata = sgd_step(make_model(torch.float64), tokenizer, batch, 3, old_log_probs=old,
                                grpo_loss=GRPOLossConfig("dapo", LOW, HIGH), **normalization("token"))
    assert relative_difference(higher, symmetric) > 1e-3
    assert float(metadata["clip_fraction"]) == pytest.approx(clipped.sum().item() / mask.sum().item(), rel=1e-12)


@pytest.mark.parametrize("change, argument", [
    ({"pg_method": "grpo", "cliprange": 0.2}, "pg_method must be 'none'"),
    ({"kl_beta": 0.1, "ref_log_probs": torch.zeros(8, 40)}, "kl_beta 0"),
    ({"grpo_loss": GRPOLossConfig(beta=0.1)}, "grpo_loss.beta > 0 needs"),
    ({"grpo_loss": types.SimpleNamespace(loss_fn="ppo", clip_lower=0.2, clip_higher=0.2, kl_estimator="k3",
                                         beta=0.0)}, "loss_fn"),
    ({"grpo_loss": types.SimpleNamespace(loss_fn="dapo", clip_lower=0.2, clip_higher=0.2)}, "lacks a field"),
    ({"grpo_loss": types.SimpleNamespace(loss_fn="dapo", clip_lower=0.2, clip_higher=0.2, kl_estimator="k3",
                                         beta=-1.0)}, "grpo_loss.beta must be"),
])
def test_bad_grpo_loss_arguments_raise_naming_them(make_model, tokenizer, change, argument):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    before = [p.detach().clone() for p in model.parameters()]
    arguments = {"grpo_loss": GRPOLossConfig(), "old_log_probs": make_old_log_probs(model, batch, tokenizer),
                 **change}
    with pytest.raises(ValueError, match=argument):
        sgd_step(model, tokenizer, batch, 2, **arguments)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
