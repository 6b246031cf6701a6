"""compute_policy_gradient_loss, compute_grpo_loss and truncated_importance_weights."""

import math
from types import SimpleNamespace

import pytest
import torch
from naive import kl, policy_gradient_loss

from course import (
    GRPOLossConfig,
    compute_grpo_loss,
    compute_policy_gradient_loss,
    estimate_kl,
    truncated_importance_weights,
)
from course.variants import KL_ESTIMATORS

pytestmark = pytest.mark.usefixtures("single_thread")

F64 = torch.float64
# Shared hand example: two sequences of three tokens, ratios 0.5, 1, 1.5 in both, A = +1 and -1.
RATIOS = torch.tensor([[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]], dtype=F64)
OLD = torch.full((2, 3), -1.0, dtype=F64)
ADV = torch.tensor([1.0, -1.0], dtype=F64)


def _policy_log_probs():
    return (torch.log(RATIOS) + OLD).requires_grad_()  # log π = log r + log π_old


def _loss_and_grad(method, mask=None, cliprange=0.2, advantages=ADV):
    logp = _policy_log_probs()
    loss, meta = compute_policy_gradient_loss(advantages, logp, method, OLD, cliprange, mask)
    loss.backward(torch.ones_like(loss))
    return loss.detach(), logp.grad, {k: float(v) for k, v in meta.items()}


# ----------------------------------------------------------------------------- per-token losses


def test_none_is_reinforce():
    loss, grad, meta = _loss_and_grad("none")
    logp = torch.log(RATIOS) + OLD
    torch.testing.assert_close(loss, -ADV[:, None] * logp)           # −A · log π
    torch.testing.assert_close(grad, -ADV[:, None].expand(2, 3))     # ∂/∂log π = −A
    assert meta["on_policy_loss_mean"] == pytest.approx(0.0)         # rows cancel exactly


def test_noclip_hand_worked():
    loss, grad, meta = _loss_and_grad("noclip")
    # −A·r: row 1 (A=1) -0.5 -1 -1.5, row 2 (A=-1) 0.5 1 1.5; ∂/∂log π = −A·r: the same numbers
    expected = torch.tensor([[-0.5, -1.0, -1.5], [0.5, 1.0, 1.5]], dtype=F64)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, expected)
    assert meta["importance_ratio_mean"] == pytest.approx(1.0)       # (0.5+1+1.5)·2 / 6
    assert meta["importance_ratio_count"] == 6
    assert meta["off_policy_loss_mean"] == pytest.approx(0.0)


def test_grpo_clip_hand_worked():
    # ε = 0.2, band [0.8, 1.2]
    # A=+1: −min(r, clip r) = −min(.5,.8), −min(1,1), −min(1.5,1.2) = -0.5, -1, -1.2
    # A=-1: −min(−r, −clip r) = −min(−.5,−.8), ..., −min(−1.5,−1.2) = 0.8, 1, 1.5
    # gradient −A·r where the unclipped term is the min, 0 where the clipped (constant) one is:
    #   A=+1, r=1.5 > 1.2 and A=-1, r=0.5 < 0.8 lose their gradient; the other two r≠1 tokens keep it
    loss, grad, meta = _loss_and_grad("grpo")
    torch.testing.assert_close(loss, torch.tensor([[-0.5, -1.0, -1.2], [0.8, 1.0, 1.5]], dtype=F64))
    torch.testing.assert_close(grad, torch.tensor([[-0.5, -1.0, 0.0], [0.0, 1.0, 1.5]], dtype=F64))
    # clipped = exactly the two gradient-less tokens, not every token outside the band (that is 4)
    assert meta["clip_count"] == 2 and meta["clip_total"] == 6
    assert meta["clip_fraction"] == pytest.approx(2 / 6)
    assert meta["importance_ratio_mean"] == pytest.approx(1.0)
    assert meta["off_policy_loss_mean"] == pytest.approx((-0.5 - 1 - 1.2 + 0.8 + 1 + 1.5) / 6)


def test_grpo_metadata_counts_response_tokens_only():
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])  # hides the A=-1, r=0.5 clipped token
    _, _, meta = _loss_and_grad("grpo", mask=mask)
    assert meta["clip_count"] == 1 and meta["clip_total"] == 5
    assert meta["clip_fraction"] == pytest.approx(0.2)
    assert meta["importance_ratio_mean"] == pytest.approx((0.5 + 1 + 1.5 + 1 + 1.5) / 5)  # 1.1
    assert meta["off_policy_loss_mean"] == pytest.approx((-0.5 - 1 - 1.2 + 1 + 1.5) / 5)  # -0.04


def test_cispo_weight_is_capped_and_carries_no_gradient():
    # weight sg(min(r, 1.2)) = 0.5, 1, 1.2 in both rows; loss −w·A·log π; ∂/∂log π = −w·A exactly.
    # Were w not detached, the gradient would gain −A·r·log π on the uncapped tokens.
    loss, grad, meta = _loss_and_grad("cispo")
    w = torch.tensor([[0.5, 1.0, 1.2], [0.5, 1.0, 1.2]], dtype=F64)
    logp = torch.log(RATIOS) + OLD
    torch.testing.assert_close(loss, -w * ADV[:, None] * logp)
    torch.testing.assert_close(grad, -w * ADV[:, None])
    # capped = r > 1.2, whatever the sign of A: the r = 1.5 token of each row
    assert meta["clip_count"] == 2 and meta["clip_total"] == 6


def test_gspo_ratio_is_the_geometric_mean_over_response_tokens():
    # token ratios 2 and 8 on the response, 100 on a masked position; A = 1; ε = 10 (no clipping)
    # s = exp((ln 2 + ln 8) / 2) = 4   (product 16, arithmetic mean 5, with the masked token 11.7)
    old = torch.zeros(1, 3, dtype=F64)
    logp = torch.log(torch.tensor([[2.0, 8.0, 100.0]], dtype=F64)).requires_grad_()
    mask = torch.tensor([[1, 1, 0]])
    loss, meta = compute_policy_gradient_loss(torch.ones(1, dtype=F64), logp, "gspo", old, 10.0, mask)
    torch.testing.assert_close(loss, torch.full((1, 3), -4.0, dtype=F64))  # −s on every position
    (loss * mask).sum().backward()
    # (loss · mask).sum() = −2s and ∂s/∂log π_t = s/|o| = 2 on response tokens (0 on the masked
    # one), so the gradient is −2 · 2 = −4 there
    torch.testing.assert_close(logp.grad, torch.tensor([[-4.0, -4.0, 0.0]], dtype=F64))
    assert float(meta["importance_ratio_mean"]) == pytest.approx(4.0)


def test_gspo_clips_per_sequence_hand_worked():
    # ε = 0.2. Row ratios (geometric means over the response):
    #   row 0: A=+1, tokens 2, 8        -> s = 4,     clipped to 1.2: loss −1.2, clipped
    #   row 1: A=−1, tokens 0.5, 0.125  -> s = 0.25,  −min(−.25, −.8) = 0.8,     clipped
    #   row 2: A=−1, tokens 2, 8        -> s = 4,     −min(−4, −1.2) = 4,        not clipped
    #   row 3: empty response: not counted
    ratios = torch.tensor([[2, 8], [0.5, 0.125], [2, 8], [3, 3]], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [0, 0]])
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=F64)
    loss, meta = compute_policy_gradient_loss(adv, torch.log(ratios), "gspo",
                                              torch.zeros(4, 2, dtype=F64), 0.2, mask)
    torch.testing.assert_close(loss[:3], torch.tensor([[-1.2] * 2, [0.8] * 2, [4.0] * 2], dtype=F64))
    meta = {k: float(v) for k, v in meta.items()}
    assert meta["clip_count"] == 2 and meta["clip_total"] == 3
    assert meta["clip_fraction"] == pytest.approx(2 / 3)
    assert meta["importance_ratio_mean"] == pytest.approx((4 + 0.25 + 4) / 3)


@pytest.mark.parametrize("method", ["none", "noclip", "grpo", "gspo", "cispo"])
def test_matches_naive_values_and_gradients(method):
    gen = torch.Generator().manual_seed(7)
    logp = (-3 * torch.rand(5, 6, generator=gen, dtype=F64)).requires_grad_()
    old = logp.detach() + 0.4 * torch.randn(5, 6, generator=gen, dtype=F64)
    adv = torch.randn(5, generator=gen, dtype=F64)
    mask = (torch.rand(5, 6, generator=gen) < 0.7).long()
    mask[4] = 0  # an empty response
    weights = torch.randn(5, 6, generator=gen, dtype=F64)
    loss, _ = compute_policy_gradient_loss(adv, logp, method, old, 0.2, mask)
    (loss * mask * weights).sum().backward()
    grad = logp.grad.clone()
    logp.grad = None
    expected = policy_gradient_loss(method, adv, logp, old, 0.2, mask)
    (expected * mask * weights).sum().backward()
    torch.testing.assert_close(loss * mask, expected * mask, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, logp.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["grpo", "gspo", "cispo"])
def test_bool_and_integer_masks_agree(method):
    gen = torch.Generator().manual_seed(11)
    logp = -torch.rand(4, 5, generator=gen, dtype=F64)
    old = logp + 0.5 * torch.randn(4, 5, generator=gen, dtype=F64)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=F64)
    mask = (torch.rand(4, 5, generator=gen) < 0.6).long()
    loss_int, meta_int = compute_policy_gradient_loss(adv, logp, method, old, 0.2, mask)
    loss_bool, meta_bool = compute_policy_gradient_loss(adv, logp, method, old, 0.2, mask.bool())
    torch.testing.assert_close(loss_int, loss_bool)
    assert {k: float(v) for k, v in meta_int.items()} == {k: float(v) for k, v in meta_bool.items()}


def test_half_precision_log_probs_are_computed_in_float32():
    # r = exp(0.5) = 1.6487213; rounded to bf16 it would be 1.6484375 (3e-4 off)
    logp = torch.tensor([[-0.5]]).bfloat16()
    old = torch.tensor([[-1.0]]).bfloat16()
    loss, _ = compute_policy_gradient_loss(torch.ones(1), logp, "noclip", old)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, -torch.exp(logp.float() - old.float()))


def test_advantages_as_column_are_accepted():
    logp = torch.log(RATIOS) + OLD
    flat, _ = compute_policy_gradient_loss(ADV, logp, "grpo", OLD, 0.2)
    column, _ = compute_policy_gradient_loss(ADV[:, None], logp, "grpo", OLD, 0.2)
    torch.testing.assert_close(flat, column)


@pytest.mark.parametrize("kwargs, argument", [
    ({"pg_method": "grpo", "cliprange": 0.2}, "old_log_probs"),
    ({"pg_method": "noclip"}, "old_log_probs"),
    ({"pg_method": "grpo", "old_log_probs": OLD}, "cliprange"),
    ({"pg_method": "cispo", "old_log_probs": OLD}, "cliprange"),
    ({"pg_method": "grpo", "old_log_probs": OLD[:, :2], "cliprange": 0.2},
     "old_log_probs"),
    ({"pg_method": "ppo"}, "pg_method"),
    ({"raw_rewards_or_advantages": torch.ones(3, dtype=F64)}, "raw_rewards_or_advantages"),
    ({"response_mask": torch.ones(2, 4)}, "response_mask"),
])
def test_bad_inputs_raise_naming_the_argument(kwargs, argument):
    arguments = {"raw_rewards_or_advantages": ADV, "policy_log_probs": torch.log(RATIOS) + OLD}
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=argument):
        compute_policy_gradient_loss(**arguments)


# ----------------------------------------------------------------------------- compute_grpo_loss


def _config(**overrides):
    fields = {"loss_fn": "dapo", "clip_lower": 0.2, "clip_higher": 0.28, "kl_estimator": "k3",
              "beta": 0.05}
    fields.update(overrides)
    return fields


def test_course_config_defaults():
    config = GRPOLossConfig()
    assert (config.loss_fn, config.clip_lower, config.clip_higher, config.kl_estimator,
            config.beta) == ("dapo", 0.2, 0.2, "k3", 0.0)


@pytest.mark.parametrize("make_config", [lambda f: GRPOLossConfig(**f), lambda f: SimpleNamespace(**f)])
def test_dapo_hand_worked(make_config):
    # band [1 − 0.2, 1 + 0.28] = [0.8, 1.28]
    # A=+1: pg_losses −r = -0.5 -1 -1.5; pg_losses2 −clip(r) = -0.8 -1 -1.28; max -0.5 -1 -1.28
    # A=-1: pg_losses  r =  0.5  1  1.5; pg_losses2  clip(r) =  0.8  1  1.28; max  0.8  1  1.5
    adv = ADV[:, None].expand(2, 3)
    new = _policy_log_probs()
    ratio = torch.exp(new - OLD)
    pg1, pg2, pg_max, kl_values = compute_grpo_loss(new, ratio, adv, None, make_config(_config()))
    torch.testing.assert_close(pg1, torch.tensor([[-0.5, -1, -1.5], [0.5, 1, 1.5]], dtype=F64))
    torch.testing.assert_close(pg2, torch.tensor([[-0.8, -1, -1.28], [0.8, 1, 1.28]], dtype=F64))
    torch.testing.assert_close(pg_max, torch.tensor([[-0.5, -1, -1.28], [0.8, 1, 1.5]], dtype=F64))
    assert kl_values.shape == (2, 3) and torch.all(kl_values == 0)  # no reference model
    pg_max.sum().backward()
    # gradient −A·r where the unclipped loss is the max: (−.5, −1, 0), (0, 1, 1.5)
    torch.testing.assert_close(new.grad, torch.tensor([[-0.5, -1, 0], [0, 1, 1.5]], dtype=F64))


def test_cispo_hand_worked():
    # weight sg(min(r, 1.28)) = 0.5, 1, 1.28; pg_losses = pg_losses2 = −A·w·log π
    adv = ADV[:, None].expand(2, 3)
    new = _policy_log_probs()
    ratio = torch.exp(new - OLD)
    pg1, pg2, pg_max, _ = compute_grpo_loss(new, ratio, adv, None, SimpleNamespace(**_config(loss_fn="cispo")))
    w = torch.tensor([[0.5, 1.0, 1.28]] * 2, dtype=F64)
    expected = -adv * w * new.detach()
    torch.testing.assert_close(pg1, expected)
    torch.testing.assert_close(pg2, expected)
    torch.testing.assert_close(pg_max, expected)
    pg_max.sum().backward()
    torch.testing.assert_close(new.grad, -adv * w)  # no gradient through the weight or the ratio


@pytest.mark.parametrize("loss_fn", ["dapo", "cispo"])
@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_tis_weights_scale_pg_loss_max_and_never_kl(loss_fn, estimator):
    gen = torch.Generator().manual_seed(KL_ESTIMATORS.index(estimator))
    new = -torch.rand(3, 4, generator=gen, dtype=F64)
    ratio = torch.exp(0.3 * torch.randn(3, 4, generator=gen, dtype=F64))
    adv = torch.randn(3, 1, generator=gen, dtype=F64).expand(3, 4)
    ref = new + 0.5 * torch.randn(3, 4, generator=gen, dtype=F64)
    tis = torch.rand(3, 4, generator=gen, dtype=F64) * 2
    config = SimpleNamespace(**_config(loss_fn=loss_fn, kl_estimator=estimator))
    plain = compute_grpo_loss(new, ratio, adv, ref, config)
    weighted = compute_grpo_loss(new, ratio, adv, ref, config, tis_weights=tis)
    torch.testing.assert_close(weighted[2], plain[2] * tis)
    torch.testing.assert_close(weighted[0], plain[0])
    torch.testing.assert_close(weighted[1], plain[1])
    torch.testing.assert_close(weighted[3], plain[3])  # the KL is never importance-weighted
    # kl is the configured estimator of δ = new − ref, unscaled by beta
    torch.testing.assert_close(plain[3], kl(new - ref, estimator, ratio), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(plain[3], estimate_kl(new, ref, estimator, ratio=ratio))


def test_grpo_loss_bad_config_raises():
    new = torch.zeros(1, 2, dtype=F64)
    for bad in [{"loss_fn": "ppo"}, {"kl_estimator": 2}]:
        with pytest.raises(ValueError, match="loss_fn|kl_estimator"):
            compute_grpo_loss(new, new.exp(), new, new, SimpleNamespace(**_config(**bad)))


# ----------------------------------------------------------------------------- truncated IS


def test_truncated_importance_weights_hand_worked():
    # exp(old − sampler) = 2, 0.5, 3 -> capped at 2.5: 2, 0.5, 2.5; the masked position is 0
    sampler = torch.zeros(1, 3, dtype=F64)
    old = torch.tensor([[math.log(2), math.log(0.5), math.log(3)]], dtype=F64).requires_grad_()
    w = truncated_importance_weights(old, sampler, 2.5)
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5, 2.5]], dtype=F64))
    assert not w.requires_grad
    masked = truncated_importance_weights(old, sampler, 2.5, torch.tensor([[1, 0, 1]]))
    torch.testing.assert_close(masked, torch.tensor([[2.0, 0.0, 2.5]], dtype=F64))
    torch.testing.assert_close(
        truncated_importance_weights(old, sampler, 2.5, torch.tensor([[True, True, False]])),
        torch.tensor([[2.0, 0.5, 0.0]], dtype=F64))


def test_truncated_importance_weights_bad_shapes_raise():
    with pytest.raises(ValueError, match="sampler_log_probs|old_log_probs"):
        truncated_importance_weights(torch.zeros(2, 3), torch.zeros(2, 4), 2.0)


# ----------------------------------------------------------------------------- masked inf / nan
# A masked position may hold anything: a log-prob of -inf at padding, a nan from an overflowed
# old log-prob at a prompt position. Selecting the loss afterwards keeps the value finite but not
# the gradient (0·∞ = nan in backward), so every input is masked before any nonlinearity.
BAD = (float("nan"), float("inf"), -float("inf"))
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)


def _poisoned(values, mask=MASK):
    poisoned = values.detach().clone()
    for number, (row, column) in enumerate((~mask).nonzero().tolist()):
        poisoned[row, column] = BAD[number % 3]
    return poisoned


def _masked_value_and_grad(method, policy, old):
    logp = policy.detach().clone().requires_grad_()
    loss, meta = compute_policy_gradient_loss(ADV, logp, method, old, 0.2, MASK)
    total = torch.where(MASK, loss, 0).sum()
    total.backward()
    return torch.where(MASK, loss.detach(), 0), logp.grad, meta


@pytest.mark.parametrize("method", ["none", "noclip", "grpo", "gspo", "cispo"])
@pytest.mark.parametrize("poison", ["old", "both"])
def test_masked_inf_and_nan_change_neither_value_nor_gradient(method, poison):
    clean_value, clean_grad, clean_meta = _masked_value_and_grad(method, _policy_log_probs(), OLD)
    policy = _poisoned(_policy_log_probs()) if poison == "both" else _policy_log_probs()
    value, grad, meta = _masked_value_and_grad(method, policy, _poisoned(OLD))
    assert torch.isfinite(grad).all(), grad  # the bug this guards: grad = [-0.37, -0.14, nan]
    torch.testing.assert_close(value, clean_value, rtol=0, atol=0)
    torch.testing.assert_close(grad, clean_grad, rtol=0, atol=0)
    assert (grad[~MASK] == 0).all() and (grad[MASK] != 0).any()
    for key, clean in clean_meta.items():
        assert float(meta[key]) == pytest.approx(float(clean)), key


def test_selecting_after_exp_is_the_bug_the_masking_prevents():
    # the naive form: exp of the raw log-ratio, then select. Finite value, nan gradient.
    logp = _policy_log_probs()
    loss = torch.where(MASK, -ADV[:, None] * torch.exp(logp - _poisoned(OLD)), 0)
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isnan(logp.grad).any()


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_kl_with_a_mask_ignores_inf_and_nan_off_it(estimator):
    new = _policy_log_probs()
    ref = OLD + 0.3
    ratio = torch.exp(new.detach() - OLD)

    def value_and_grad(new, ref, ratio):
        leaf = new.detach().clone().requires_grad_()
        kl = estimate_kl(leaf, ref, estimator, ratio=ratio, response_mask=MASK)
        torch.where(MASK, kl, 0).sum().backward()
        return torch.where(MASK, kl.detach(), 0), leaf.grad

    clean = value_and_grad(new, ref, ratio)
    poisoned = value_and_grad(_poisoned(new), _poisoned(ref), _poisoned(ratio))
    assert torch.isfinite(poisoned[1]).all()
    for got, expected in zip(poisoned, clean):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(clean[0], torch.where(MASK, kl(new.detach() - ref, estimator, ratio), 0))


def test_tis_weights_ignore_inf_and_nan_off_the_mask():
    old, sampler = OLD + 0.1, OLD
    clean = truncated_importance_weights(old, sampler, 2.0, MASK)
    poisoned = truncated_importance_weights(_poisoned(old), _poisoned(sampler), 2.0, MASK)
    torch.testing.assert_close(poisoned, clean, rtol=0, atol=0)
    assert (poisoned[~MASK] == 0).all()
    torch.testing.assert_close(clean[MASK], torch.full((3,), math.exp(0.1), dtype=F64))
