"""docs/frameworks.md, held: every row of the map that states a number is computed here, with the
course's functions, against a value worked by hand from the framework's own formula.

Each hand formula restates what the cited framework file computes (TRL 1.10.0.dev0 at f2cd577, verl
0.10.0.dev at 1dda039 and, where marked, 0.8.0.dev at b178a3c, open-instruct e6c3044, prime-rl
559b447, SkyRL a956457; see the doc's Sources); nothing is imported
from the frameworks and nothing is downloaded. The last tests parse the doc: a table row that holds
a number must name one of the tests in this file, and every name must exist.
"""

import math
import re
from pathlib import Path

import pytest
import torch
from naive import OPEN_INSTRUCT_KL_ESTIMATORS as KL_ESTIMATOR_NUMBERS

from course.advantages import compute_group_normalized_rewards
from course.aggregation import aggregate_loss_across_microbatch, calculate_loss_and_backward
from course.frontier.loss import FrontierLoss
from course.frontier.maxrl import maxrl_advantages
from course.frontier.policy_losses import dual_clip_loss, floored_cispo_loss, gmpo_loss, sapo_loss
from course.frontier.trust_region import (
    dppo_loss,
    outlier_mask,
    sequence_log_ratio,
    trust_region_mask,
)
from course.loop.filters import informative_groups
from course.loop.importance import importance_weights
from course.losses import compute_policy_gradient_loss
from course.off_policy import (
    GRPOLossConfig,
    compute_grpo_loss,
    estimate_kl,
    truncated_importance_weights,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "frameworks.md"
TOL = 1e-12
D = torch.float64

# One small batch for the normalization rows: B = 4 rows, T = 5 positions, 11 response tokens.
LOSS = torch.tensor([[0.5, -1.0, 2.0, 0.0, 0.0],
                     [1.5, 0.25, 0.0, 0.0, 0.0],
                     [-0.5, 3.0, 1.0, -2.0, 0.75],
                     [2.0, 0.0, 0.0, 0.0, 0.0]], dtype=D)
MASK = torch.tensor([[1, 1, 1, 0, 0],
                     [1, 1, 0, 0, 0],
                     [1, 1, 1, 1, 1],
                     [1, 0, 0, 0, 0]], dtype=D)


def close(a, b, tol=TOL):
    return abs(float(a) - float(b)) <= tol


def rows_of(loss, mask):
    """Python lists of the masked values of each row."""
    return [[float(v) for v, m in zip(lr, mr) if m] for lr, mr in zip(loss, mask)]


# --- advantages ------------------------------------------------------------------------------

REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.0, 1.0], dtype=D)  # 2 groups of G = 4


def hand_group_advantages(rewards, G, eps, ddof, divide=True):
    out = []
    for g in range(len(rewards) // G):
        group = [float(r) for r in rewards[g * G:(g + 1) * G]]
        mean = sum(group) / G
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (G - ddof))
        out += [(r - mean) / (std + eps) if divide else r - mean for r in group]
    return out


def test_trl_group_scaling_is_course_std_with_eps_1e_4():
    """TRL scale_rewards='group': (r − mean)/(unbiased std + 1e-4); 'none': r − mean."""
    course, _ = compute_group_normalized_rewards(REWARDS, 4, advantage_eps=1e-4)
    for got, want in zip(course, hand_group_advantages(REWARDS, 4, 1e-4, ddof=1)):
        assert close(got, want)
    # group 1: rewards (1, 0, 0, 1), unbiased std = sqrt(1/3), A = ±0.5/(0.57735… + 1e-4)
    assert close(course[0], 0.5 / (math.sqrt(1 / 3) + 1e-4))
    none, _ = compute_group_normalized_rewards(REWARDS, 4, advantage_normalizer="none")
    for got, want in zip(none, hand_group_advantages(REWARDS, 4, 0, 1, divide=False)):
        assert close(got, want)


def test_verl_grpo_advantage_is_course_default():
    """verl compute_grpo_outcome_advantage: torch.std (unbiased) + 1e-6, or no std."""
    course, _ = compute_group_normalized_rewards(REWARDS, 4)
    for got, want in zip(course, hand_group_advantages(REWARDS, 4, 1e-6, ddof=1)):
        assert close(got, want)
    centered, _ = compute_group_normalized_rewards(REWARDS, 4, advantage_normalizer="none")
    for got, want in zip(centered, hand_group_advantages(REWARDS, 4, 0, 1, divide=False)):
        assert close(got, want)


def test_verl_singleton_group():
    """verl: a prompt with one response gets mean 0 and std 1, so A = r/(1 + 1e-6); the course
    refuses std normalization with G = 1."""
    assert close(0.5 / (1 + 1e-6), 0.4999995000005)
    with pytest.raises(ValueError, match="group_size >= 2"):
        compute_group_normalized_rewards(torch.tensor([0.5], dtype=D), 1)


def test_oi_centered_is_course_normalizer_none():
    """open-instruct advantage_normalization_type='centered' (its default): r − mean."""
    course, _ = compute_group_normalized_rewards(REWARDS, 4, advantage_normalizer="none")
    assert [float(a) for a in course] == [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, -0.5, 0.5]


def test_oi_population_std():
    """open-instruct 'standard': np.std (population, ddof 0) + 1e-8. Without the eps its advantages are
    the course's (unbiased std) times sqrt(G/(G − 1)) = sqrt(4/3) = 1.1547005383792515 for G = 4."""
    course, _ = compute_group_normalized_rewards(REWARDS, 4, advantage_eps=0.0)
    population = hand_group_advantages(REWARDS, 4, 0.0, ddof=0)
    for got, want in zip(course, population):
        if want:
            assert close(want / float(got), math.sqrt(4 / 3))
    assert close(math.sqrt(4 / 3), 1.1547005383792515)
    # with the eps each keeps: 1e-8 there, 1e-6 here; group 1's first advantage
    assert close(population[0], 1.0)
    assert close(hand_group_advantages(REWARDS, 4, 1e-8, ddof=0)[0], 0.5 / (0.5 + 1e-8))


# --- loss normalization ----------------------------------------------------------------------

def test_trl_dapo_is_course_token():
    """TRL loss_type='dapo' (default): Σ m·ℓ / N, N the tokens of the whole accumulated step over all
    ranks (num_items_in_batch / num_processes, then DDP's mean). Here N = 11."""
    hand = sum(sum(r) for r in rows_of(LOSS, MASK)) / 11
    assert close(aggregate_loss_across_microbatch(LOSS, MASK, "token"), hand)
    # the same through two micro-batches of the step: course calculate_loss_and_backward
    total = 0.0
    for rows in (slice(0, 2), slice(2, 4)):
        leaf = LOSS[rows].clone().requires_grad_(True)
        total += float(calculate_loss_and_backward(leaf, MASK[rows], "token", 4, 11))
    assert close(total, hand)
    assert close(hand, 7.5 / 11)


def test_trl_grpo_is_course_sequence():
    """TRL loss_type='grpo': per-row token mean, mean over the local batch, / accumulation steps."""
    per_row = [sum(r) / len(r) for r in rows_of(LOSS, MASK)]
    trl = (sum(per_row[:2]) / 2 + sum(per_row[2:]) / 2) / 2  # 2 micro-batches of 2 rows
    assert close(aggregate_loss_across_microbatch(LOSS, MASK, "sequence"), trl)
    assert close(trl, (1.5 / 3 + 1.75 / 2 + 2.25 / 5 + 2.0) / 4)


def test_trl_dr_grpo_is_course_constant():
    """TRL loss_type='dr_grpo': Σ m·ℓ / (B · max_completion_length); L = 512 by default."""
    L = 512
    hand = sum(sum(r) for r in rows_of(LOSS, MASK)) / (4 * L)
    assert close(aggregate_loss_across_microbatch(LOSS, MASK, "constant", 4 * L), hand)
    assert close(hand, 7.5 / 2048)


def test_verl_token_mean_is_course_token():
    """verl loss_agg_mode='token-mean' with the global batch_num_tokens (engine workers):
    Σ m·ℓ / N · dp_size per micro-batch; DDP's mean over dp_size ranks gives Σ/N."""
    N, dp = 11, 2
    shares = [float((LOSS[r] * MASK[r]).sum()) / N * dp for r in (slice(0, 2), slice(2, 4))]
    # rank 0 holds rows 0-1, rank 1 rows 2-3; gradients are averaged over the 2 ranks
    assert close(sum(shares) / dp, float(aggregate_loss_across_microbatch(LOSS, MASK, "token")))
    leaf = LOSS[0:2].clone().requires_grad_(True)
    assert close(calculate_loss_and_backward(leaf, MASK[0:2], "token", 4, N, world_size=dp), shares[0])


def test_verl_seq_mean_token_mean():
    """verl 'seq-mean-token-mean': per-row Σ/(n + 1e-8), summed over rows, divided by the rows that
    have a token when global_batch_size is not passed (b178a3c's dp_actor), by every row when it is
    (1dda039's engine workers). The course divides by every row."""
    loss = torch.cat([LOSS, torch.zeros(1, 5, dtype=D)])
    mask = torch.cat([MASK, torch.zeros(1, 5, dtype=D)])  # row 4 is empty
    rows = rows_of(loss, mask)
    verl = sum(sum(r) / (len(r) + 1e-8) for r in rows) / 4  # 4 non-empty rows
    course = float(aggregate_loss_across_microbatch(loss, mask, "sequence"))  # / 5 rows
    assert close(course * 5 / 4, verl, tol=1e-8)
    assert close(course, (1.5 / 3 + 1.75 / 2 + 2.25 / 5 + 2.0) / 5)
    # without the empty row the two agree up to the 1e-8 in verl's per-row denominator
    assert close(aggregate_loss_across_microbatch(LOSS, MASK, "sequence"), verl, tol=1e-8)
    # 1dda039's engine workers pass global_batch_size = every row of the mini-batch (ray_trainer:
    # ppo_mini_batch_size × rollout.n): the empty row counts, as in the course
    engine = sum(sum(r) / (len(r) + 1e-8) for r in rows) / 5
    assert close(course, engine, tol=1e-8) and not close(course, engine, tol=1e-12)
    for r in rows[:4]:  # each row's mean is 1e-8/n smaller, relatively
        assert close((sum(r) / len(r) - sum(r) / (len(r) + 1e-8)) / (sum(r) / len(r)),
                     1e-8 / len(r), tol=1e-15)


def test_verl_seq_mean_token_sum_is_constant_b():
    """verl 'seq-mean-token-sum': Σ_i Σ_t m·ℓ / (rows) = course constant with C = B."""
    hand = sum(sum(r) for r in rows_of(LOSS, MASK)) / 4
    assert close(aggregate_loss_across_microbatch(LOSS, MASK, "constant", 4), hand)


def test_verl_seq_mean_token_sum_norm():
    """verl 'seq-mean-token-sum-norm' at 1dda039 (agg_loss, verl #5417): each micro-batch
    Σ m·ℓ / B · dp_size / T, B = global_batch_size (every row of the mini-batch), T =
    loss_scale_factor (or the padded width); DDP's mean over dp_size ranks gives Σ / (B·T): the
    course's constant with C = B·T, Dr. GRPO's. At b178a3c (legacy dp_actor, verl #3741) each
    micro-batch was Σ m·ℓ / T times 1/K: C = K·T, b = B/K times smaller than B·T."""
    B, T, dp = 4, 5, 2
    # rank 0 holds rows 0-1, rank 1 rows 2-3, one micro-batch each
    shares = [float((LOSS[r] * MASK[r]).sum()) / B * dp / T for r in (slice(0, 2), slice(2, 4))]
    verl = sum(shares) / dp
    assert close(aggregate_loss_across_microbatch(LOSS, MASK, "constant", B * T), verl)
    assert close(verl, 7.5 / 20)
    leaf = LOSS[0:2].clone().requires_grad_(True)
    got = calculate_loss_and_backward(leaf, MASK[0:2], "constant", B, 11, B * T, world_size=dp)
    assert close(got, shares[0])
    K = 2  # b178a3c: two micro-batches of b = 2 rows on one rank
    legacy = sum(float((LOSS[r] * MASK[r]).sum()) / T / K for r in (slice(0, 2), slice(2, 4)))
    assert close(aggregate_loss_across_microbatch(LOSS, MASK, "constant", K * T), legacy)
    assert close(legacy / verl, 2.0)  # b = B/K = 2


def test_per_micro_batch_token_mean():
    """TRL bnpo, verl's legacy dp_actor token-mean (verl #7321) and open-instruct before PR #1161:
    each micro-batch divided by its OWN token count, then averaged over the K micro-batches. One
    micro-batch with 1 token of loss 1, one with 3 tokens of loss 3: (1/1 + 9/3)/2 = 2, not 10/4 = 2.5."""
    loss = torch.tensor([[1.0, 0.0, 0.0], [3.0, 3.0, 3.0]], dtype=D)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]], dtype=D)
    per_micro = [float(aggregate_loss_across_microbatch(loss[k:k + 1], mask[k:k + 1], "token"))
                 for k in range(2)]
    assert close(sum(per_micro) / 2, 2.0)
    assert close(aggregate_loss_across_microbatch(loss, mask, "token"), 2.5)
    step = 0.0
    for k in range(2):  # the course's split: each micro-batch's share of the step's N = 4
        leaf = loss[k:k + 1].clone().requires_grad_(True)
        step += float(calculate_loss_and_backward(leaf, mask[k:k + 1], "token", 2, 4))
    assert close(step, 2.5)


def test_oi_token_denominator():
    """open-instruct loss_denominator='token': Σ m·(pg + β·kl) / N_group (all ranks), times the
    data-parallel world size (DeepSpeed averages); the course's token share, world_size = 2."""
    N, world = 11, 2
    leaf = LOSS[2:4].clone().requires_grad_(True)
    got = calculate_loss_and_backward(leaf, MASK[2:4], "token", 4, N, world_size=world)
    assert close(got, float((LOSS[2:4] * MASK[2:4]).sum()) / N * world)
    assert close(got, 4.25 / 11 * 2)


def test_oi_constant_denominator():
    """open-instruct loss_denominator=C (a float): Σ m·ℓ / C = course constant normalization."""
    C = 2048.0
    assert close(aggregate_loss_across_microbatch(LOSS, MASK, "constant", C), 7.5 / 2048)


# --- the per-token losses --------------------------------------------------------------------

def log_ratio_batch(ratios, advantages):
    """old log-probs 0 and new log-probs log r: a (B, 1) batch whose ratio is r."""
    new = torch.log(torch.tensor(ratios, dtype=D)).unsqueeze(1)
    return new, torch.zeros_like(new), torch.tensor(advantages, dtype=D)


def test_trl_clip_is_course_grpo():
    """TRL epsilon = 0.2, epsilon_high = None → 0.2: −min(r·A, clip(r, 0.8, 1.2)·A)."""
    ratios, advantages = [1.5, 0.5, 1.1, 0.5], [1.0, 1.0, -2.0, -2.0]
    new, old, adv = log_ratio_batch(ratios, advantages)
    loss, meta = compute_policy_gradient_loss(adv, new, "grpo", old, 0.2)
    hand = [-min(r * a, min(max(r, 0.8), 1.2) * a) for r, a in zip(ratios, advantages)]
    assert hand == pytest.approx([-1.2, -0.5, 2.2, 1.6], abs=TOL)
    for got, want in zip(loss[:, 0], hand):
        assert close(got, want)
    # clipped: (A > 0 and r > 1.2) or (A < 0 and r < 0.8): rows 0 and 3 of 4
    assert close(meta["clip_fraction"], 0.5)


def test_trl_cispo_cap_is_epsilon_high():
    """TRL loss_type='cispo': weight min(r, epsilon_high), the cap itself (ScaleRL's ε_max, 5.0
    recommended); the course caps at 1 + cliprange, so cliprange = epsilon_high − 1 = 4."""
    new, old, adv = log_ratio_batch([6.0, 2.0], [1.0, 1.0])
    loss, _ = compute_policy_gradient_loss(adv, new, "cispo", old, 4.0)
    for got, r in zip(loss[:, 0], [6.0, 2.0]):
        assert close(got, -min(r, 5.0) * 1.0 * math.log(r))
    # epsilon_high left at None is epsilon = 0.2: every weight is at most 0.2. A cap below 1 has no
    # course equivalent (cliprange = 0.2 − 1 is refused).
    with pytest.raises(ValueError, match="positive cliprange"):
        compute_policy_gradient_loss(adv, new, "cispo", old, 0.2 - 1)


def test_trl_sequence_level_is_course_gspo():
    """TRL importance_sampling_level='sequence' with loss_type='grpo': s = exp(masked mean log r),
    −min(s·A, clip(s)·A), per row. The course's gspo with sequence normalization."""
    new = torch.tensor([[0.1, 0.3, 0.0], [-0.4, 0.0, 0.0]], dtype=D)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=D)
    adv = torch.tensor([1.0, -1.0], dtype=D)
    loss, _ = compute_policy_gradient_loss(adv, new, "gspo", torch.zeros_like(new), 0.2, mask)
    s = [math.exp(0.2), math.exp(-0.4)]
    hand = [-min(s[0] * 1.0, min(max(s[0], 0.8), 1.2)), -min(-s[1], -min(max(s[1], 0.8), 1.2))]
    assert close(loss[0, 0], hand[0]) and close(loss[1, 0], hand[1])
    assert close(aggregate_loss_across_microbatch(loss, mask, "sequence"), sum(hand) / 2)


def test_trl_kl_is_course_k3():
    """TRL beta > 0: exp(ref − logp) − (ref − logp) − 1 per token (k3), added after the IS weight:
    ℓ = w·pg + β·k3. δ = logp − ref = 0.3: k3 = e^−0.3 − 1 + 0.3 = 0.040818220681717866."""
    delta = torch.tensor([[0.3]], dtype=D)
    k3 = estimate_kl(delta, torch.zeros_like(delta), "k3")
    ref_minus_logp = -0.3
    assert close(k3, math.exp(ref_minus_logp) - ref_minus_logp - 1)
    assert close(k3, 0.040818220681717866)


def test_trl_vllm_is_default_is_sequence_mask_cap_3():
    """TRL vllm_importance_sampling_mode='sequence_mask', clip_max 3.0: ρ = exp(Σ_t (old − sampler)),
    0 for the whole row when ρ > 3; 'token_truncate': min(ρ_t, 3)."""
    old = torch.tensor([[0.5, 0.7, 0.0], [0.2, 0.3, 0.0]], dtype=D)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]], dtype=D)
    sampler = torch.zeros_like(old)
    w = importance_weights(old, sampler, mask, "sequence", "mask", 3.0)
    assert close(w[0, 0], 0.0) and close(w[0, 1], 0.0)  # exp(1.2) = 3.32 > 3: masked
    assert close(w[1, 0], math.exp(0.5)) and close(w[1, 1], math.exp(0.5))  # 1.65 ≤ 3: kept
    assert close(w[0, 2], 0.0)  # padding
    old_t = torch.tensor([[1.5, 0.5]], dtype=D)
    t = importance_weights(old_t, torch.zeros_like(old_t), torch.ones_like(old_t), "token", "truncate", 3.0)
    assert close(t[0, 0], 3.0) and close(t[0, 1], math.exp(0.5))


def test_one_update_per_rollout_means_ratio_one():
    """TRL num_iterations = 1, verl ppo_epochs = 1 with one mini-batch: π_old = π, r = 1, nothing clips,
    and the grpo loss is −A per token."""
    new = torch.tensor([[-0.7, -1.2]], dtype=D)
    loss, meta = compute_policy_gradient_loss(torch.tensor([0.5], dtype=D), new, "grpo", new.clone(), 0.2)
    assert close(loss[0, 0], -0.5) and close(loss[0, 1], -0.5)
    assert close(meta["clip_fraction"], 0.0)


def test_verl_vanilla_is_course_grpo_off_dual_clip():
    """verl loss_mode='vanilla', clip_ratio_low = clip_ratio_high = 0.2: the course's grpo loss
    wherever A ≥ 0 or r ≤ clip_ratio_c = 3."""
    ratios, advantages = [1.5, 0.5, 2.5, 0.9], [1.0, -1.0, -1.0, 2.0]
    new, old, adv = log_ratio_batch(ratios, advantages)
    course, _ = compute_policy_gradient_loss(adv, new, "grpo", old, 0.2)
    for got, r, a in zip(course[:, 0], ratios, advantages):
        clip1 = max(-a * r, -a * min(max(r, 0.8), 1.2))
        verl = min(-a * 3.0, clip1) if a < 0 else clip1
        assert close(got, verl)


def test_verl_dual_clip():
    """verl dual-clip (clip_ratio_c = 3.0): for A < 0 the loss is at most −A·3. A = −1, r = 4: verl 3,
    the course's grpo (no dual clip) 4, its `dual_clip_loss` (`--dual-clip 3`) 3; A = +1, r = 0.5:
    −0.5 in both."""
    new, old, adv = log_ratio_batch([4.0, 0.5], [-1.0, 1.0])
    course, _ = compute_policy_gradient_loss(adv, new, "grpo", old, 0.2)
    assert close(course[0, 0], 4.0)
    verl = [min(1.0 * 3.0, max(4.0, 1.2)), max(-0.5, -0.8)]
    assert verl == [3.0, -0.5]
    dual = dual_clip_loss(new, old, adv, None, 0.2, 0.2, clip_ratio_c=3.0)
    assert close(dual[0, 0], verl[0]) and close(dual[1, 0], verl[1])


def test_verl_cispo_floor():
    """verl loss_mode='cispo': weight sg(clip(r, 1 − clip_ratio_low, 1 + clip_ratio_high)); the course
    and open-instruct cap only above. r = 0.5, ε = 0.2, A = 1, log π = −1: verl 0.8, the course 0.5."""
    new, old, adv = log_ratio_batch([0.5, 1.5], [1.0, 1.0])
    logp = torch.tensor([[-1.0], [-1.0]], dtype=D)
    ratio = torch.exp(new - old)
    course, _ = compute_policy_gradient_loss(adv, logp, "cispo", logp - torch.log(ratio), 0.2)
    assert close(course[0, 0], -0.5 * -1.0)  # 0.5: no floor
    verl = [-min(max(r, 0.8), 1.2) * 1.0 * -1.0 for r in (0.5, 1.5)]
    assert verl == pytest.approx([0.8, 1.2], abs=TOL)
    assert close(course[1, 0], verl[1])  # above the floor they agree
    floored = floored_cispo_loss(logp, logp - torch.log(ratio), adv, None, 0.2, 0.2)  # --cispo-floor
    assert close(floored[0, 0], verl[0]) and close(floored[1, 0], verl[1])


def test_trl_verl_sapo():
    """TRL loss_type='sapo' and verl loss_mode='sapo': −(4/τ)·σ(τ·(r − 1))·A with τ = 1.0 where A > 0
    and 1.05 where A ≤ 0. r = 1.5, A = 1: −4σ(0.5) = −2.4898373; r = 0.5, A = −1:
    (4/1.05)·σ(−0.525) = 1.4159383."""
    new, old, adv = log_ratio_batch([1.5, 0.5], [1.0, -1.0])
    course = sapo_loss(new, old, adv, None, tau_pos=1.0, tau_neg=1.05)
    for got, r, a in zip(course[:, 0], [1.5, 0.5], [1.0, -1.0]):
        tau = 1.0 if a > 0 else 1.05
        assert close(got, -(4 / tau) / (1 + math.exp(-tau * (r - 1))) * a)
    assert close(course[0, 0], -2.4898373248074184) and close(course[1, 0], 1.4159383303033666)


def test_trl_verl_gmpo():
    """TRL GMPOTrainer (epsilon 0.4) and verl loss_mode='geo_mean' (its clip_ratio, 0.2): one ratio per
    row, exp(mean_t of log r clipped one-sidedly in log space). Tokens r = 1.5, 0.5, A = 1: TRL
    −exp((0.4 + log 0.5)/2) = −0.8636622, verl −exp((0.2 + log 0.5)/2) = −0.7814739."""
    new = torch.log(torch.tensor([[1.5, 0.5]], dtype=D))
    old, adv = torch.zeros_like(new), torch.tensor([1.0], dtype=D)
    for eps, want in ((0.4, -0.8636621728550089), (0.2, -0.7814738505414528)):
        hand = -math.exp((min(math.log(1.5), eps) + math.log(0.5)) / 2)
        assert close(hand, want)
        course = gmpo_loss(new, old, adv, None, eps, eps)
        assert close(course[0, 0], want) and close(course[0, 1], want)


def test_trl_sequence_is_product():
    """TRL vllm_importance_sampling_mode='sequence_*' sums the log-ratios (the product of the ratios;
    TRL #5814): 400 tokens of log ρ = −0.002 give 0.4493290, the geometric mean 0.9980020."""
    log_rho, mask = torch.full((1, 400), -0.002, dtype=D), torch.ones(1, 400)
    assert close(math.exp(sequence_log_ratio(log_rho, mask, "product").item()), 0.44932896411722156)
    assert close(math.exp(sequence_log_ratio(log_rho, mask, "geometric").item()), math.exp(-0.002))
    weights = importance_weights(torch.zeros(1, 400, dtype=D), -log_rho, mask, "sequence", "truncate", 3.0)
    assert close(weights[0, 0], 0.44932896411722156)  # --is-level sequence is TRL's product


def test_trl_token_mask_outliers():
    """TRL vllm_importance_sampling_mode='token_mask', clip_min 0.5, clip_max 3.0: ρ = 0.4, 1.0, 3.5
    weigh 0, 1, 0. The course's outlier mask keeps the same tokens (`--outlier-low 0.5 --outlier-high 3`)."""
    log_rho = torch.log(torch.tensor([[0.4, 1.0, 3.5]], dtype=D))
    trl = [0.0 if r < 0.5 or r > 3.0 else r for r in (0.4, 1.0, 3.5)]
    keep = outlier_mask(log_rho, torch.ones(1, 3), low=0.5, high=3.0)
    assert [float(k) * r for k, r in zip(keep[0], (0.4, 1.0, 3.5))] == pytest.approx(trl, abs=TOL)


def test_prime_rl_dppo_default():
    """prime-rl's default loss (dppo_mask_low = dppo_mask_high = 0.2, adv_tau 1.0, kl_tau 1e-3):
    −keep·A·r + 1e-3·(log r)², r = π/μ. p = 0.5, μ = 0.25, A = 1: dropped, 1e-3·log² 2 = 0.00048045;
    A = −1: kept, 2.00048045."""
    new = torch.log(torch.tensor([[0.5], [0.5]], dtype=D))
    sampler, adv = torch.log(torch.tensor([[0.25], [0.25]], dtype=D)), torch.tensor([1.0, -1.0], dtype=D)
    course = dppo_loss(new, sampler, adv, None, 0.2, 0.2, 1e-3)
    kl = 1e-3 * math.log(2) ** 2
    assert close(course[0, 0], kl) and close(course[1, 0], 2.0 + kl)
    assert FrontierLoss("dppo", trust_region=0.2, ratio_kl=1e-3, ratio_against="sampler").loss_fn == "dppo"


def test_prime_rl_maxrl():
    """prime-rl algo max_rl: (r − mean)/mean per group, 0 for a group with mean ≤ 0; its PR #2985
    (open) gives a group of one A = r. [1, 0, 0, 0] → [3, −1, −1, −1]; [0, 0] → [0, 0]; [1] → [1]."""
    assert maxrl_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4).tolist() == [3.0, -1.0, -1.0, -1.0]
    assert maxrl_advantages(torch.tensor([0.0, 0.0]), 2).tolist() == [0.0, 0.0]
    assert maxrl_advantages(torch.tensor([1.0]), 1).tolist() == [1.0]


def test_skyrl_cispo_anchor():
    """SkyRL cispo_anchor: 'old' (r = π/π_old, recomputed: 1 at one update per batch) or 'rollout'
    (r = π/μ). π = 0.6, π_old = 0.6, μ = 0.4, A = 1, cap 1.2: weight 1 against π_old, min(1.5, 1.2) = 1.2
    against μ (`--ratio-against sampler`)."""
    logp = torch.log(torch.tensor([[0.6]], dtype=D))
    micro = {"advantages": torch.tensor([1.0], dtype=D), "response_mask": torch.ones(1, 1),
             "sampler_log_probs": torch.log(torch.tensor([[0.4]], dtype=D))}
    for against, weight in (("old", 1.0), ("sampler", 1.2)):
        config = FrontierLoss("cispo", clip_lower=0.2, clip_higher=0.2, cispo_floor=False, ratio_against=against)
        loss, _ = config.per_token_loss(micro, logp, logp.clone(), None, None)
        assert close(loss[0, 0], -weight * math.log(0.6))


def test_verl_k3_clamp():
    """verl kl_loss_type='low_var_kl' (k3): δ' = ref − logp clamped to [−20, 20], then exp(δ') − δ' − 1
    clamped to [−10, 10]. δ = logp − ref = −15: the course gives e^15 − 16 = 3269001.3724721107, verl 10;
    inside the clamp (δ = 0.5) they agree."""
    logp = torch.tensor([[-15.0, 0.5]], dtype=D)
    course = estimate_kl(logp, torch.zeros_like(logp), "k3")
    assert close(course[0, 0], math.exp(15) - 16, tol=1e-6)
    assert close(math.exp(15) - 16, 3269001.3724721107, tol=1e-6)
    verl = min(max(math.exp(15.0) - 15.0 - 1, -10), 10)
    assert verl == 10
    assert close(course[0, 1], math.exp(-0.5) + 0.5 - 1)


def test_verl_kl_loss_types():
    """verl kl_loss_type: kl/k1 = δ, mse/k2 = δ²/2, low_var_kl/k3; default kl_loss_coef 0.001 (off:
    use_kl_loss False). δ = 0.3."""
    logp = torch.tensor([[0.3]], dtype=D)
    ref = torch.zeros_like(logp)
    assert close(estimate_kl(logp, ref, "k1"), 0.3)
    assert close(estimate_kl(logp, ref, "k2"), 0.045)
    assert close(estimate_kl(logp, ref, "k3"), math.exp(-0.3) - 1 + 0.3)
    assert close(0.001 * float(estimate_kl(logp, ref, "k1")), 0.0003)


def test_verl_rollout_is():
    """verl algorithm.rollout_correction: rollout_is token|sequence, weights truncated at
    rollout_is_threshold = 2.0 (off by default: rollout_is null)."""
    old = torch.tensor([[0.4, 0.5]], dtype=D)
    mask = torch.ones_like(old)
    token = importance_weights(old, torch.zeros_like(old), mask, "token", "truncate", 2.0)
    assert close(token[0, 0], math.exp(0.4)) and close(token[0, 1], math.exp(0.5))
    sequence = importance_weights(old, torch.zeros_like(old), mask, "sequence", "truncate", 2.0)
    assert close(sequence[0, 0], 2.0)  # exp(0.9) = 2.46 > 2


def test_oi_dapo_defaults():
    """open-instruct loss_fn='dapo', clip_lower 0.2, clip_higher 0.272: clip(r, 0.8, 1.272).
    r = 1.3, A = 1 → −1.272; r = 0.7, A = −1 → 0.8."""
    config = GRPOLossConfig(loss_fn="dapo", clip_lower=0.2, clip_higher=0.272)
    ratio = torch.tensor([[1.3, 0.7]], dtype=D)
    adv = torch.tensor([[1.0, -1.0]], dtype=D)
    _, _, loss, kl = compute_grpo_loss(torch.log(ratio), ratio, adv, None, config)
    assert close(loss[0, 0], -1.272) and close(loss[0, 1], 0.8)
    assert float(kl.abs().sum()) == 0.0


def test_oi_cispo():
    """open-instruct loss_fn='cispo': −A·sg(min(r, 1 + clip_higher))·log π, no lower bound.
    r = 2, A = 1, log π = −0.5 → 1.272·0.5 = 0.636; r = 0.5 keeps 0.5."""
    config = GRPOLossConfig(loss_fn="cispo", clip_higher=0.272)
    ratio = torch.tensor([[2.0, 0.5]], dtype=D)
    logp = torch.tensor([[-0.5, -0.5]], dtype=D)
    _, _, loss, _ = compute_grpo_loss(logp, ratio, torch.tensor([1.0], dtype=D), None, config)
    assert close(loss[0, 0], 0.636) and close(loss[0, 1], 0.25)


def test_oi_kl_estimators():
    """open-instruct kl_estimator index 0..3 = course k1, k2, k3, ratio_k1 (default 2 = k3,
    beta 0.05); δ = new − ref clamped to [−40, 40] there and here. δ = 0.3, r = 1.1."""
    assert KL_ESTIMATOR_NUMBERS == {"0": "k1", "1": "k2", "2": "k3", "3": "ratio_k1"}
    new = torch.tensor([[0.3]], dtype=D)
    ref = torch.zeros_like(new)
    ratio = torch.tensor([[1.1]], dtype=D)
    hand = [0.3, 0.3 ** 2 / 2, math.expm1(-0.3) + 0.3, 1.1 * 0.3]
    for index, want in enumerate(hand):
        assert close(estimate_kl(new, ref, KL_ESTIMATOR_NUMBERS[str(index)], ratio), want)
    # beta 0.05 times k3: open-instruct's loss/kl_avg for this token
    assert close(0.05 * hand[2], 0.05 * (math.exp(-0.3) - 0.7))
    far = torch.tensor([[-50.0]], dtype=D)
    assert close(estimate_kl(far, ref, "k1"), -40.0)


def test_oi_rho_defaults():
    """open-instruct use_rho_correction True, rho_clamp_upper_bound 2.0 (before PR #1650:
    truncated_importance_sampling_ratio_cap 2.0): ρ = π_old/π_vllm per token, min(ρ, 2)."""
    old = torch.tensor([[math.log(3.0), math.log(1.5)]], dtype=D)
    sampler = torch.zeros_like(old)
    mask = torch.ones_like(old)
    w = truncated_importance_weights(old, sampler, 2.0, mask)
    assert close(w[0, 0], 2.0) and close(w[0, 1], 1.5)
    same = importance_weights(old, sampler, mask, "token", "truncate", 2.0)
    assert torch.allclose(w, same, rtol=0, atol=TOL)


def test_oi_rho_mask():
    """open-instruct rho_mask_upper_bound C (> 1; 0 = off) with the clamp off: tokens with ρ > C get
    weight 0, the rest keep ρ: course mode 'mask'. C = 2: ρ = 3 → 0, ρ = 1.5 → 1.5."""
    old = torch.tensor([[math.log(3.0), math.log(1.5)]], dtype=D)
    w = importance_weights(old, torch.zeros_like(old), torch.ones_like(old), "token", "mask", 2.0)
    assert close(w[0, 0], 0.0) and close(w[0, 1], 1.5)


def test_oi_rho_sequence_level():
    """open-instruct rho_mask_sequence_level: ρ = exp(mean_t log ρ_t) per row, clamped and masked:
    course level 'geometric'. log ρ = (0.2, 1.0): exp(0.6) = 1.822 ≤ 2 for both tokens."""
    old = torch.tensor([[0.2, 1.0, 0.0]], dtype=D)
    mask = torch.tensor([[1, 1, 0]], dtype=D)
    w = importance_weights(old, torch.zeros_like(old), mask, "geometric", "truncate", 2.0)
    assert close(w[0, 0], math.exp(0.6)) and close(w[0, 1], math.exp(0.6)) and close(w[0, 2], 0.0)


def test_oi_filter_zero_std_is_dynamic_sampling():
    """open-instruct filter_zero_std_samples (on by default) drops a prompt whose G rewards have
    np.std = 0; the course's --dynamic-sampling drops a group whose max − min ≤ 1e-6."""
    rewards = [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    assert informative_groups(rewards, 4) == [False, True]


# --- newer options: TRL f2cd577, verl 1dda039 ------------------------------------------------

def random_policy_batch(seed, B=64, T=9, spread=1.0):
    """Log-probs of π and of a base π_b (B, T), a ragged mask and advantages of both signs: log r
    spread ~ N(0, spread²), so ratios far outside any clip appear."""
    g = torch.Generator().manual_seed(seed)
    new = torch.log(torch.rand(B, T, generator=g, dtype=D) * 0.98 + 0.01)
    base = new - torch.randn(B, T, generator=g, dtype=D) * spread
    lengths = torch.randint(1, T + 1, (B, 1), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths).to(D)
    adv = torch.randn(B, generator=g, dtype=D)
    return new, base, mask, adv


def trl_clipped_with_delta(ratio, adv, eps_low, eps_high, delta):
    """TRL grpo_trainer (f2cd577) for grpo/bnpo/dr_grpo/dapo/luspo: coef_2 = clip(r, 1 − ε,
    1 + ε_high); with `delta` set, coef_1 = min(r, δ); per token −min(coef_1·A, coef_2·A)."""
    coef_1 = ratio if delta is None else torch.clamp(ratio, max=delta)
    coef_2 = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    return -torch.minimum(coef_1 * adv, coef_2 * adv)


def test_trl_delta_is_course_dual_clip():
    """TRL `delta` (INTELLECT-2's two-sided clip) caps r at δ in the unclipped term. Where
    δ ≥ 1 + ε_high this is the course's dual clip with c = δ: for A > 0 clip(r) ≤ δ already, for
    A < 0 min(max(r, clip(r)), δ) = max(min(r, δ), clip(r)). Error 0 at δ = 4 and δ = 1.5
    (ε = 0.2, ε_high = 0.28); at δ = 1.1 < 1.28 they part, and without the dual clip too."""
    new, old, mask, adv = random_policy_batch(1)
    ratio, A = torch.exp(new - old), adv.unsqueeze(1)
    for delta in (4.0, 1.5):
        trl = trl_clipped_with_delta(ratio, A, 0.2, 0.28, delta)
        course = dual_clip_loss(new, old, adv, None, 0.2, 0.28, clip_ratio_c=delta)
        assert float((course - trl).abs().max()) == 0.0
        plain = dual_clip_loss(new, old, adv, None, 0.2, 0.28, clip_ratio_c=None)
        assert float((plain - trl).abs().max()) > 1.0  # a token with A < 0, r ≫ δ
    low = trl_clipped_with_delta(ratio, A, 0.2, 0.28, 1.1)
    course = dual_clip_loss(new, old, adv, None, 0.2, 0.28, clip_ratio_c=1.1)
    assert float((course - low).abs().max()) > 1e-3
    # one token by hand: A = −1, r = 6, δ = 4: TRL −min(−4, −1.28) = 4, the course's dual clip 4
    assert close(trl_clipped_with_delta(torch.tensor(6.0), -1.0, 0.2, 0.28, 4.0), 4.0)


def test_trl_luspo_is_course_gspo_constant_b():
    """TRL loss_type='luspo' (sequence level): GSPO's row loss ℓ_i times its length n_i, a mean
    over the micro-batch's rows, / accumulation steps: over the step Σ_i n_i·ℓ_i / B, the course's
    gspo (one value per token of the row) with constant normalization C = B. Not GSPO's own
    sequence mean, which weighs every row once."""
    new, old, _, adv = random_policy_batch(2, B=4, T=5, spread=0.3)
    course, _ = compute_policy_gradient_loss(adv, new, "gspo", old, 0.2, MASK)
    s = torch.exp(((new - old) * MASK).sum(1) / MASK.sum(1))  # (B,)
    row = -torch.minimum(s * adv, torch.clamp(s, 0.8, 1.2) * adv)  # (B,) TRL's (B, 1)
    n = MASK.sum(1)
    trl = sum(float((row[k] * n[k]).mean()) / 2 for k in (slice(0, 2), slice(2, 4)))  # K = 2
    assert close(aggregate_loss_across_microbatch(course, MASK, "constant", 4), trl)
    assert not close(aggregate_loss_across_microbatch(course, MASK, "sequence"), trl, tol=1e-3)


def vespo_weight(w, adv, k_pos=2.0, lambda_pos=3.0, k_neg=3.0, lambda_neg=2.0):
    """TRL get_gamma_weights (f2cd577): φ(w) = exp(λ + k·log w − λ·w), (k, λ) by the sign of A
    (A ≥ 0: k_pos, λ_pos), w the row's product of ratios; φ(1) = 1. Detached."""
    k, lam = (k_pos, lambda_pos) if adv >= 0 else (k_neg, lambda_neg)
    return math.exp(lam + k * math.log(w) - lam * w)


def test_trl_vespo_weight():
    """TRL loss_type='vespo': −φ(w)·A·log π per token, w = exp(Σ_t log r_t) of the row, normalized
    as dapo. On policy (w = 1) φ = 1 and the loss is the course's REINFORCE (`none`); off policy the
    Gamma weight has no course counterpart: w = 0.5 gives φ = e^1.5/4 = 1.1204 for A > 0 and
    e/8 = 0.3398 for A < 0, where a capped ratio would give 0.5."""
    assert vespo_weight(1.0, 1.0) == 1.0 and vespo_weight(1.0, -1.0) == 1.0
    assert close(vespo_weight(0.5, 1.0), math.exp(1.5) / 4)
    assert close(vespo_weight(0.5, 1.0), 1.1204222675845161)
    assert close(vespo_weight(0.5, -1.0), math.e / 8)
    new, _, mask, adv = random_policy_batch(3, B=6, T=4)
    course, _ = compute_policy_gradient_loss(adv, new, "none", None, None, mask)
    trl = -1.0 * adv.unsqueeze(1) * new * mask  # φ(1) = 1
    assert torch.allclose(course * mask, trl, rtol=0, atol=TOL)


def verl_geo_mean_rows(new, old, adv, mask, eps):
    """verl compute_policy_loss_geo_mean (1dda039): log r clipped one-sidedly by sign(A), then
    ratio = exp(Σ_t m·clip / (n + 1e-8)), A_row = Σ_t m·A / (n + 1e-8); per row −A_row·ratio."""
    log_ratio = new - old
    sign = torch.sign(adv)
    clipped = sign * torch.minimum(sign * log_ratio, sign * log_ratio.clamp(-eps, eps))
    n = mask.sum(-1)
    ratio = torch.exp((clipped * mask).sum(-1) / (n + 1e-8))
    return -((adv * mask).sum(-1) / (n + 1e-8)) * ratio  # (B,)


def test_verl_geo_mean_guard():
    """verl geo_mean divides by n + 1e-8 in the row's advantage and in the mean of the clipped
    log r: verl = course · n/(n + ε) · exp(−S·ε/(n(n + ε))), S the row's sum of clipped log r, a
    relative difference of (1 + S/n)·1e-8/n to first order. One token, A = −1, log r = 1: 2e-8."""
    new, old, mask, adv = random_policy_batch(4, spread=0.5)
    A = adv.unsqueeze(1).expand_as(new)
    verl = verl_geo_mean_rows(new, old, A, mask, 0.2)
    course = gmpo_loss(new, old, adv, mask, 0.2, 0.2)[:, 0]
    sign = torch.sign(A)
    log_ratio = new - old
    S = (sign * torch.minimum(sign * log_ratio, sign * log_ratio.clamp(-0.2, 0.2)) * mask).sum(-1)
    n, eps = mask.sum(-1), 1e-8
    exact = course * n / (n + eps) * torch.exp(-S * eps / (n * (n + eps)))
    assert torch.allclose(verl, exact, rtol=1e-15, atol=0)
    first_order = (1 + S / n) * eps / n
    assert torch.allclose((course - verl) / course, first_order, rtol=1e-6, atol=0)
    one = verl_geo_mean_rows(torch.tensor([[1.0]], dtype=D), torch.zeros(1, 1, dtype=D),
                             torch.tensor([[-1.0]], dtype=D), torch.ones(1, 1, dtype=D), 0.2)
    course_one = gmpo_loss(torch.tensor([[1.0]], dtype=D), torch.zeros(1, 1, dtype=D),
                           torch.tensor([-1.0], dtype=D), None, 0.2, 0.2)[0, 0]
    assert close(course_one, math.e)
    assert abs(float((course_one - one[0]) / course_one) - 2e-8) < 1e-12


def test_verl_geo_mean_is_a_micro_batch_mean():
    """verl geo_mean takes torch.mean over the micro-batch's rows, not agg_loss; the FSDP engine
    backpropagates each micro-batch's loss with no 1/K. K = 2 equal micro-batches: the step's
    loss is 2 times the course's gmpo under sequence normalization. 0.8.0.dev's dp_actor scaled
    each micro-batch by 1/K: the course's value."""
    new, old, _, adv = random_policy_batch(5, B=4, T=5, spread=0.3)
    A = adv.unsqueeze(1).expand_as(new)
    verl = sum(float(verl_geo_mean_rows(new[k], old[k], A[k], MASK[k], 0.2).mean())
               for k in (slice(0, 2), slice(2, 4)))
    course = gmpo_loss(new, old, adv, MASK, 0.2, 0.2)
    step = float(aggregate_loss_across_microbatch(course, MASK, "sequence"))
    assert close(verl / step, 2.0, tol=1e-7)  # up to the 1e-8 guards
    assert close(verl / 2, step, tol=1e-7)  # 0.8.0.dev: times 1/K


def test_verl_token_sum_is_constant_one():
    """verl loss_agg_mode='token-sum' (1dda039, verl #7197): each micro-batch Σ m·ℓ · dp_size;
    DDP's mean over dp_size ranks gives Σ m·ℓ of the global batch: the course's constant, C = 1."""
    dp = 2
    shares = [float((LOSS[r] * MASK[r]).sum()) * dp for r in (slice(0, 2), slice(2, 4))]
    assert close(sum(shares) / dp, aggregate_loss_across_microbatch(LOSS, MASK, "constant", 1))
    assert close(sum(shares) / dp, 7.5)
    leaf = LOSS[2:4].clone().requires_grad_(True)
    got = calculate_loss_and_backward(leaf, MASK[2:4], "constant", 4, 11, 1.0, world_size=dp)
    assert close(got, shares[1])


def verl_vanilla(log_ratio, adv, eps_low=0.2, eps_high=0.2, c=3.0):
    """verl compute_policy_loss_vanilla (1dda039): log r clamped to ±20, max(−A·r, −A·clip(r)),
    and where A < 0 the dual clip min(that, −A·c)."""
    ratio = torch.exp(log_ratio.clamp(-20, 20))
    loss = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high))
    return torch.where(adv < 0, torch.minimum(loss, -adv * c), loss)


def test_verl_bypass_ppo_clip():
    """verl rollout_correction.bypass_mode, loss_type 'ppo_clip' (default): old_log_probs =
    rollout_log_probs, then vanilla with no IS weights: r = π/μ, clip 0.2, dual clip 3. The
    course's FrontierLoss against the sampler (π_old and the TIS weights are not used)."""
    new, sampler, mask, adv = random_policy_batch(6)
    old = new - 0.1  # a recomputed π_old that bypass mode never reads
    micro = {"advantages": adv, "response_mask": mask, "sampler_log_probs": sampler}
    config = FrontierLoss("dapo", clip_lower=0.2, clip_higher=0.2, dual_clip=3.0,
                          ratio_against="sampler")
    course, _ = config.per_token_loss(micro, new, old, torch.full_like(new, 0.5), None)
    verl = verl_vanilla(new - sampler, adv.unsqueeze(1)) * mask
    assert torch.allclose(course, verl, rtol=0, atol=TOL)
    against_old, _ = FrontierLoss("dapo", dual_clip=3.0).per_token_loss(micro, new, old, None, None)
    assert not torch.allclose(against_old, verl, rtol=0, atol=1e-3)


def test_verl_bypass_reinforce():
    """verl bypass_mode, loss_type 'reinforce', rollout_is 'token', rollout_is_threshold 2.0:
    −A·sg(w)·log π, w = min(exp(log π − log μ), 2) (log ratio clamped to ±20). The course's CISPO
    against the sampler with cap 1 + ε_high = 2, no floor: values and gradients agree."""
    new, sampler, mask, adv = random_policy_batch(7)
    micro = {"advantages": adv, "response_mask": mask, "sampler_log_probs": sampler}
    config = FrontierLoss("cispo", clip_higher=1.0, cispo_floor=False, ratio_against="sampler")
    leaf = new.clone().requires_grad_(True)
    course, _ = config.per_token_loss(micro, leaf, new - 0.1, None, None)
    (course_grad,) = torch.autograd.grad(course.sum(), leaf)
    verl_leaf = new.clone().requires_grad_(True)
    with torch.no_grad():
        w = torch.exp((verl_leaf - sampler).clamp(-20, 20)).clamp(max=2.0) * mask
    verl = -adv.unsqueeze(1) * verl_leaf * w
    (verl_grad,) = torch.autograd.grad(verl.sum(), verl_leaf)
    assert torch.allclose(course, verl * mask, rtol=0, atol=TOL)
    assert torch.allclose(course_grad, verl_grad, rtol=0, atol=TOL)
    assert bool((torch.exp(new - sampler)[mask.bool()] > 2).any())  # the cap acts here


def verl_dppo_tv(new, old, adv, delta_low=0.2, delta_high=0.2, c=3.0):
    """verl compute_policy_loss_dppo_tv (1dda039): keep where A > 0 and p − q ≤ δ_high, or A ≤ 0
    and p − q ≥ −δ_low (p = exp(log π), q = exp(log π_old)); w = sg(min(r, c)), c = clip_ratio_c
    (3.0 in actor.yaml); per token −A·w·log π·keep. Returns (loss, keep)."""
    p, q = torch.exp(new), torch.exp(old)
    keep = torch.where(adv > 0, p - q <= delta_high, p - q >= -delta_low)
    w = torch.exp((new - old).clamp(-20, 20)).clamp(max=c).detach()
    return -adv * w * new * keep, keep


def test_verl_dppo_tv():
    """verl dppo_tv: the course's trust_region_mask, but the loss −A·sg(min(r, c))·log π (c = 3)
    instead of dppo_loss's −A·r + τ·(log r)². With τ = 0 the gradients agree wherever r ≤ c; past
    c verl's weight stops at c. A = −1, p = 0.9, q = 0.2 (kept): gradients 4.5 (course) and 3
    (verl); values 4.5 and 3·log 0.9 = −0.316."""
    new, old, mask, adv = random_policy_batch(8, spread=0.7)
    A = adv.unsqueeze(1)
    leaf = new.clone().requires_grad_(True)
    verl, keep = verl_dppo_tv(leaf, old, A)
    (verl_grad,) = torch.autograd.grad(verl.sum(), leaf)
    course_keep = trust_region_mask(new, old, adv, mask, 0.2, 0.2)
    assert torch.equal(course_keep, keep & mask.bool()) and not bool(course_keep.all())
    leaf = new.clone().requires_grad_(True)
    course = dppo_loss(leaf, old, adv, None, 0.2, 0.2, kl_tau=0.0)
    (course_grad,) = torch.autograd.grad(course.sum(), leaf)
    ratio = torch.exp(new - old)
    below = ratio <= 3.0
    assert torch.allclose(course_grad[below], verl_grad[below], rtol=0, atol=TOL)
    above = keep & ~below & (A != 0)
    assert bool(above.any())
    assert torch.allclose((course_grad / verl_grad)[above], (ratio / 3.0)[above], rtol=1e-12)
    one = torch.log(torch.tensor([[0.9]], dtype=D)).requires_grad_(True)
    q, minus = torch.log(torch.tensor([[0.2]], dtype=D)), torch.tensor([-1.0], dtype=D)
    value = dppo_loss(one, q, minus, None, 0.2, 0.2, kl_tau=0.0)
    assert close(value.detach(), 4.5) and close(torch.autograd.grad(value.sum(), one)[0], 4.5)
    verl_one, _ = verl_dppo_tv(one, q, minus.unsqueeze(1))
    assert close(verl_one.detach(), -0.31608154697347884)  # 3·log 0.9
    assert close(torch.autograd.grad(verl_one.sum(), one)[0], 3.0)


def binary_kl(p, q):
    """verl compute_policy_loss_dppo_kl (1dda039): the KL between the Bernoulli distributions of
    the token under π_old (q) and π (p), with its 1e-8 guards."""
    return q * math.log(q / p) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))


def test_verl_dppo_kl_is_not_the_tv_mask():
    """verl dppo_kl keeps a token where A > 0 and (binary KL ≤ δ_high or p ≤ q), or A ≤ 0 and
    (KL ≤ δ_low or p ≥ q). No course counterpart: at the same δ = 0.2, q = 0.001 → p = 0.2
    (A > 0) is kept by trust_region_mask (p − q = 0.199) and dropped by the KL (0.216);
    q = 0.5 → p = 0.75 is dropped by the first (0.25) and kept by the KL (0.144)."""
    cases = ((0.2, 0.001, False, True), (0.75, 0.5, True, False))
    for p, q, kl_keeps, tv_keeps in cases:
        kl = binary_kl(p, q)
        assert (kl <= 0.2 or p <= q) == kl_keeps
        new, old = torch.log(torch.tensor([[p]], dtype=D)), torch.log(torch.tensor([[q]], dtype=D))
        tv = trust_region_mask(new, old, torch.tensor([1.0], dtype=D))
        assert bool(tv[0, 0]) == tv_keeps
    assert close(binary_kl(0.2, 0.001), 0.2166225880755976)
    assert close(binary_kl(0.75, 0.5), 0.14384102622589076)


# --- metrics ---------------------------------------------------------------------------------

def test_frac_reward_zero_std():
    """TRL frac_reward_zero_std = share of completions whose group std is 0 = (equal G) share of
    groups: 1 − groups_with_signal. 3 groups, one constant: 1/3."""
    rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.0, 0.0]
    signal = informative_groups(rewards, 3)
    groups_with_signal = sum(signal) / len(signal)
    stds = torch.tensor(rewards, dtype=D).view(3, 3).std(dim=1)  # TRL's nanstd: unbiased
    per_completion = torch.isclose(stds, torch.zeros_like(stds)).repeat_interleave(3).double().mean()
    assert close(per_completion, 1 - groups_with_signal)
    assert close(per_completion, 1 / 3)


def test_trl_cispo_clip_ratio():
    """TRL cispo_clip_ratio counts tokens with r > ε_high AND A > 0; the course's cispo clip_fraction
    counts every token whose weight was capped. r = 6 twice, A = ±1, ε_high = 5: TRL 1/2, course 2/2."""
    new, old, adv = log_ratio_batch([6.0, 6.0], [1.0, -1.0])
    _, meta = compute_policy_gradient_loss(adv, new, "cispo", old, 4.0)
    assert (int(meta["clip_count"]), int(meta["clip_total"])) == (2, 2)
    trl = sum(r > 5.0 and a > 0 for r, a in ((6.0, 1.0), (6.0, -1.0))) / 2
    assert trl == 0.5


def test_clip_fraction_definitions():
    """TRL clip_ratio/region_mean, verl actor/pg_clipfrac (clipped loss > unclipped loss) and
    open-instruct policy/clipfrac_avg all count the tokens where A > 0, r > 1 + ε or A < 0, r < 1 − ε:
    the course's clip_fraction. 2 of 5 tokens here."""
    ratios, advantages = [1.5, 0.5, 1.5, 0.5, 1.0], [1.0, -1.0, -1.0, 1.0, 0.0]
    new, old, adv = log_ratio_batch(ratios, advantages)
    _, meta = compute_policy_gradient_loss(adv, new, "grpo", old, 0.2)
    trl = sum((r < 0.8 and a < 0) or (r > 1.2 and a > 0) for r, a in zip(ratios, advantages)) / 5
    verl = sum(-a * min(max(r, 0.8), 1.2) > -a * r for r, a in zip(ratios, advantages)) / 5
    assert (int(meta["clip_count"]), int(meta["clip_total"])) == (2, 5)  # clip_fraction = 2/5
    assert close(trl, 2 / 5) and close(verl, 2 / 5)


# --- the doc: every numeric row names a test here --------------------------------------------

CODE_IDENTIFIER = re.compile(r"`[A-Za-z_][\w./:-]*`")  # `k3`, `grpo_utils.py`: names, not numbers
# 0.2, 3, 1e-4; not the 3 of k3, the 2 of INTELLECT-2 or a version's parts
NUMBER = re.compile(r"(?<![\w.])(?<![A-Za-z]-)\d+(?:\.\d+)?(?:e-?\d+)?(?![\w])")
TEST_TAG = re.compile(r"test:\s*`?(test_\w+)`?")
# the snapshots of the doc's Sources (TRL, verl then and now, open-instruct, prime-rl, SkyRL), or a PR
VERSION = r"1\.10\.0\.dev0|f2cd577|0\.8\.0\.dev|1dda039|e6c3044|559b447|a956457|PR #\d+|#\d+"


def table_rows(text):
    """(header cells, row cells) of every Markdown table row in the doc."""
    rows, header = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
        elif not set("".join(cells)) <= set("-: "):
            rows.append((header, cells))
    return rows


def numbers_in(header, cells):
    """The numbers a row states, leaving out its Source and Test columns and names in backticks."""
    text = " ".join(c for h, c in zip(header, cells) if h not in ("source", "test"))
    return NUMBER.findall(CODE_IDENTIFIER.sub(" ", text))


def test_the_map_has_its_tables():
    text = DOC.read_text(encoding="utf-8")
    for heading in ("## TRL", "## verl", "## open-instruct", "## prime-rl and SkyRL", "## Metrics",
                    "## Intended differences"):
        assert heading in text, heading
    rows = table_rows(text)
    assert len(rows) >= 40
    for header, cells in rows:
        assert header[-1] == "test" and "source" in header, header
        assert len(cells) == len(header), cells


def test_every_numeric_row_names_a_test():
    names = {name for name in globals() if name.startswith("test_")}
    problems = []
    for header, cells in table_rows(DOC.read_text(encoding="utf-8")):
        tags = TEST_TAG.findall(cells[-1])
        problems += [f"{tag} (row {cells[:2]}) is not a test in {Path(__file__).name}"
                     for tag in tags if tag not in names]
        if numbers_in(header, cells) and not tags:
            problems.append(f"row {cells[:2]} states {numbers_in(header, cells)} but names no test")
    assert problems == []


def test_every_row_cites_a_file_and_a_version():
    for header, cells in table_rows(DOC.read_text(encoding="utf-8")):
        source = cells[header.index("source")]
        assert re.search(r"\w+\.(py|yaml)", source), f"row {cells[0]!r} cites no file"
        assert re.search(VERSION, source), f"row {cells[0]!r} cites no version"


def test_the_tag_check_catches_a_numeric_row_without_a_test():
    header = ["option", "course", "source", "test"]
    assert numbers_in(header, ["`clip_ratio_c`", "3.0", "`core_algos.py` 0.8.0.dev", ""]) == ["3.0"]
    assert numbers_in(header, ["`kl_loss_type`", "`k3`", "`core_algos.py` 0.8.0.dev", ""]) == []
    assert numbers_in(header, ["eps", "(r − mean)/(std + 1e-4)", "", ""]) == ["1e-4"]
    assert numbers_in(header, ["`delta`", "INTELLECT-2's clip", "", ""]) == []
