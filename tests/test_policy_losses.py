"""The 2025–26 losses and masks (`course.frontier.policy_losses`, `course.frontier.trust_region`, `course.frontier.loss`)
on numbers worked by hand, each beside the wrong version it exists to catch."""

import math

import pytest
import torch

from course.frontier.loss import FrontierLoss
from course.frontier.policy_losses import dual_clip_loss, floored_cispo_loss, gmpo_loss, sapo_loss
from course.frontier.trust_region import (
    dppo_loss,
    outlier_mask,
    sequence_log_ratio,
    trust_region_mask,
)
from course.losses import compute_policy_gradient_loss

D = torch.float64


def t(*rows):
    return torch.tensor(rows, dtype=D)


def with_ratio(*rows):
    """(log π, log π_b) (B, T) whose ratios are `rows`, with log π = −1."""
    ratio = t(*rows)
    new = torch.full_like(ratio, -1.0)
    return new.requires_grad_(), (new - torch.log(ratio)).detach()


# --- SAPO -------------------------------------------------------------------------------------

def test_sapo_gate_by_hand():
    new, base = with_ratio([1.0], [1.0], [2.0])
    loss = sapo_loss(new, base, torch.tensor([1.0, -1.0, 1.0], dtype=D))
    # r = 1, A = +1, τ_pos = 1: −(4/1)·σ(0)·1 = −2;  A = −1, τ_neg = 1.05: +(4/1.05)·0.5 = 1.9047619
    # r = 2, A = +1: −4·σ(1) = −4·0.7310585786 = −2.9242343
    assert loss[:, 0].tolist() == pytest.approx([-2.0, 2 / 1.05, -4 / (1 + math.exp(-1))], abs=1e-12)
    loss.sum().backward()
    # at r = 1 the gate's slope is 1: the gradient of PPO, −A·r; at r = 2 it fades: −4σ'(1)·2
    sigma = 1 / (1 + math.exp(-1))
    assert new.grad[:, 0].tolist() == pytest.approx([-1.0, 1.0, -8 * sigma * (1 - sigma)], abs=1e-12)
    # the wrong version, PPO's hard clip at ε = 0.2, stops r = 2 at 1.2 and its gradient at 0
    clipped = compute_policy_gradient_loss(torch.tensor([1.0], dtype=D), new[2:].detach(), "grpo",
                                           base[2:], 0.2)[0]
    assert float(clipped) == pytest.approx(-1.2) and loss[2, 0].item() != pytest.approx(-1.2)


# --- GMPO -------------------------------------------------------------------------------------

def test_gmpo_clips_each_token_in_log_space_then_takes_the_geometric_mean():
    log_ratio = t([0.3, -0.1, 0.5], [-0.6, 0.1, 0.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    new = torch.full((2, 3), -1.0, dtype=D, requires_grad=True)
    loss = gmpo_loss(new, (new - log_ratio).detach(), torch.tensor([1.0, -1.0], dtype=D), mask,
                     clip_lower=0.4, clip_higher=0.4)
    # A = +1: min(log r, 0.4) = (0.3, −0.1, 0.4), mean 0.2: −e^0.2 = −1.2214028 on every token
    # A = −1: max(log r, −0.4) = (−0.4, 0.1), mean −0.15: +e^−0.15 = 0.8607080; 0 off the mask
    expected = t([-math.exp(0.2)] * 3, [math.exp(-0.15)] * 2 + [0.0])
    assert torch.allclose(loss.detach(), expected, rtol=0, atol=1e-12)
    # wrong: the product of the clipped ratios, exp(0.6) = 1.822, grows with the length
    assert -math.exp(0.6) != pytest.approx(loss[0, 0].item())
    # wrong: GSPO's order, the mean first and the clip after: exp(0.2333) = 1.2628 is not clipped
    assert -math.exp(0.7 / 3) != pytest.approx(loss[0, 0].item())


# --- the dual clip ----------------------------------------------------------------------------

def test_dual_clip_bounds_a_bad_tokens_loss_and_leaves_good_tokens_alone():
    new, base = with_ratio([4.0], [0.5])
    advantages = torch.tensor([-1.0, 1.0], dtype=D)
    loss = dual_clip_loss(new, base, advantages, None, clip_lower=0.2, clip_higher=0.2,
                          clip_ratio_c=3.0)
    # A = −1, r = 4: PPO's max(4, 1.2) = 4, the dual clip min(4, 3) = 3, and no gradient
    # A = +1, r = 0.5: max(−0.5, −0.8) = −0.5, untouched
    assert loss[:, 0].tolist() == pytest.approx([3.0, -0.5], abs=1e-12)
    loss.sum().backward()
    assert new.grad[:, 0].tolist() == pytest.approx([0.0, -0.5], abs=1e-12)
    plain = dual_clip_loss(new, base, advantages, None, 0.2, 0.2, clip_ratio_c=None)
    assert plain[0, 0].item() == pytest.approx(4.0)
    # wrong: the dual clip applied where A > 0 too gives min(−0.5, −3) = −3
    assert min(-0.5, -3.0 * 1.0) != pytest.approx(loss[1, 0].item())


# --- CISPO's floor ----------------------------------------------------------------------------

def test_cispo_floor_raises_a_small_weight_to_1_minus_eps_low():
    new, base = with_ratio([0.5], [3.0])
    advantages = torch.tensor([1.0, 1.0], dtype=D)
    loss = floored_cispo_loss(new, base, advantages, None, clip_lower=0.2, clip_higher=0.2)
    # log π = −1; r = 0.5 → weight 0.8: −0.8·1·(−1) = 0.8;  r = 3 → capped at 1.2: 1.2
    assert loss[:, 0].tolist() == pytest.approx([0.8, 1.2], abs=1e-12)
    loss.sum().backward()
    assert new.grad[:, 0].tolist() == pytest.approx([-0.8, -1.2], abs=1e-12)  # the weights
    # stage 4's cispo (capped above only) keeps 0.5: the floor is what differs
    stage_4 = compute_policy_gradient_loss(advantages, new.detach(), "cispo", base, 0.2)[0]
    assert stage_4[:, 0].tolist() == pytest.approx([0.5, 1.2], abs=1e-12)
    unfloored = floored_cispo_loss(new, base, advantages, None, clip_lower=None, clip_higher=0.2)
    assert torch.equal(unfloored.detach(), stage_4)


# --- DPPO's trust region ----------------------------------------------------------------------

def test_dppo_drops_a_token_whose_probability_moved_past_delta_in_the_advantages_direction():
    # p = 0.5, q = 0.25: moved +0.25 > 0.2; a rare token p = 0.003, q = 0.001: r = 3, moved 0.002
    new = torch.log(t([0.5], [0.5], [0.003])).requires_grad_()
    base = torch.log(t([0.25], [0.25], [0.001]))
    advantages = torch.tensor([1.0, -1.0, 1.0], dtype=D)
    keep = trust_region_mask(new, base, advantages, None, delta_low=0.2, delta_high=0.2)
    assert keep[:, 0].tolist() == [False, True, True]  # A = −1 pushes p down: its rise is allowed
    loss = dppo_loss(new, base, advantages, None, delta_low=0.2, delta_high=0.2, kl_tau=1e-3)
    kl = 1e-3 * math.log(2) ** 2  # τ·(log r)² = 1e-3·0.480453 on every token, dropped or not
    assert loss[:, 0].tolist() == pytest.approx([kl, 2.0 + kl, -3.0 + 1e-3 * math.log(3) ** 2],
                                                abs=1e-12)
    # wrong: a ratio bound |r − 1| > 0.2 drops the rare token that moved 0.002 of probability
    assert not abs(3.0 - 1) <= 0.2 and bool(keep[2, 0])


# --- masks before nonlinearities --------------------------------------------------------------

LOSSES = {
    "sapo": lambda n, b, a, m: sapo_loss(n, b, a, m),
    "gmpo": lambda n, b, a, m: gmpo_loss(n, b, a, m),
    "dual": lambda n, b, a, m: dual_clip_loss(n, b, a, m, clip_ratio_c=3.0),
    "cispo": lambda n, b, a, m: floored_cispo_loss(n, b, a, m),
    "dppo": lambda n, b, a, m: dppo_loss(n, b, a, m),
}


@pytest.mark.parametrize("name", LOSSES)
def test_inf_and_nan_off_the_mask_reach_neither_value_nor_gradient(name):
    new = t([-0.5, float("nan"), -0.2], [-1.0, -0.3, float("inf")]).requires_grad_()
    base = t([-0.7, float("inf"), -0.1], [float("-inf"), -0.4, float("nan")])
    mask = torch.tensor([[1, 0, 1], [0, 1, 0]])
    loss = LOSSES[name](new, base, torch.tensor([1.0, -1.0], dtype=D), mask)
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(new.grad).all()
    assert (loss[mask == 0] == 0).all() and (new.grad[mask == 0] == 0).all()


def test_masking_after_exp_is_the_bug_the_contract_prevents():
    new = t([-0.5, float("nan")]).requires_grad_()
    mask = torch.tensor([[1, 0]]).bool()
    ratio = torch.exp(new - t([-0.7, 0.0]))  # nan reaches exp: the wrong order
    torch.where(mask, -ratio, 0).sum().backward()
    assert torch.isnan(new.grad).any()


# --- one update per batch: r ≡ 1 against a recomputed π_old -----------------------------------

def test_clip_and_cispo_do_nothing_when_pi_old_is_recomputed_and_act_against_the_sampler():
    torch.manual_seed(0)
    new = (torch.randn(4, 6, dtype=D) - 2).requires_grad_()
    advantages = torch.tensor([1.0, -1.0, 0.5, -2.0], dtype=D)
    sampler = new.detach() + 0.5 * torch.randn(4, 6, dtype=D)  # a stale or bf16 sampler

    def grad(loss):
        new.grad = None
        loss.sum().backward()
        return new.grad.clone()

    reinforce = grad(compute_policy_gradient_loss(advantages, new, "none")[0])
    recomputed = new.detach()  # π_old scored by the weights about to step: r = 1 exactly
    for eps in (0.01, 0.2, 10.0):
        for method in ("grpo", "cispo"):
            g = grad(compute_policy_gradient_loss(advantages, new, method, recomputed, eps)[0])
            assert torch.allclose(g, reinforce, atol=1e-15), (method, eps)  # the clip is inert
    against_sampler = [grad(dual_clip_loss(new, sampler, advantages, None, eps, eps, None))
                       for eps in (0.01, 10.0)]
    assert (against_sampler[0] - against_sampler[1]).abs().max() > 0.1  # the clip acts


# --- sequence ratios and the outlier mask -----------------------------------------------------

def test_a_product_of_400_agreeing_tokens_is_far_from_1_and_their_geometric_mean_is_not():
    # the sampler agrees with π_old up to log ρ_t = −0.002 per token (a bias bf16 rounding can have)
    log_ratio = torch.full((1, 400), -0.002, dtype=D)
    mask = torch.ones(1, 400)
    product = math.exp(sequence_log_ratio(log_ratio, mask, "product").item())
    geometric = math.exp(sequence_log_ratio(log_ratio, mask, "geometric").item())
    assert product == pytest.approx(math.exp(-0.8)) and 0.4 < product < 0.7  # 0.4493: TRL #5814
    assert geometric == pytest.approx(math.exp(-0.002))  # 0.998
    empty = sequence_log_ratio(log_ratio, torch.zeros(1, 400), "geometric")
    assert empty.item() == 0.0


def test_outlier_mask_keeps_ratios_inside_the_bounds():
    log_ratio = torch.log(t([0.5, 1.0, 2.0, 4.0], [float("inf"), 1.0, 1.0, 1.0]))
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]])
    keep = outlier_mask(log_ratio, mask, low=0.8, high=3.0)
    assert keep.tolist() == [[False, True, True, False], [False, True, True, True]]
    assert outlier_mask(log_ratio, mask, high=3.0)[0].tolist() == [True, True, True, False]


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("call, argument", [
    (lambda: sapo_loss(t([0.0]), t([0.0]), t(1.0), tau_pos=0), "tau_pos"),
    (lambda: dual_clip_loss(t([0.0]), t([0.0]), t(1.0), clip_ratio_c=1.0), "clip_ratio_c"),
    (lambda: gmpo_loss(t([0.0]), t([0.0]), t(1.0), clip_lower=-1), "clip_lower"),
    (lambda: sapo_loss(t([0.0]), t([0.0]), t(1.0, 2.0)), "advantages"),
    (lambda: sapo_loss(t([0.0]), t([0.0, 1.0]), t(1.0)), "base_log_probs"),
    (lambda: dppo_loss(t([0.0]), None, t(1.0)), "base_log_probs"),
    (lambda: sequence_log_ratio(t([0.0]), torch.ones(1, 1), "sum"), "level"),
    (lambda: outlier_mask(t([0.0]), torch.ones(1, 1), low=2.0, high=1.0), "low must be"),
    (lambda: FrontierLoss(loss_fn="ppo2"), "loss_fn"),
    (lambda: FrontierLoss(loss_fn="sapo", dual_clip=3.0), "dual_clip"),
    (lambda: FrontierLoss(ratio_against="ref"), "ratio_against"),
    (lambda: FrontierLoss(loss_fn="dppo"), "trust_region"),
    (lambda: FrontierLoss(tau_neg=0.0), "tau_neg"),
    (lambda: FrontierLoss(outlier_low=2.0, outlier_high=1.0), "outlier_low"),
])
def test_bad_input_raises_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()
