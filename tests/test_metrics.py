"""LossStatistics and compare_logprobs (reference-only helpers, not graded)."""

import math

import pytest
import torch

from course import LossStatistics, compare_logprobs

F64 = torch.float64


def test_loss_statistics_weigh_micro_batches_by_their_tokens():
    # micro-batch 1: one token of value 4; micro-batch 2: three tokens of value 0.
    # token mean = 4 / 4 = 1, not the mean of micro-batch means (4 + 0) / 2 = 2
    stats = LossStatistics()
    stats.add_masked("kl", torch.tensor([[4.0, 9.0]]), torch.tensor([[1, 0]]))
    stats.add_masked("kl", torch.tensor([[0.0, 0.0, 0.0]]), torch.tensor([[1, 1, 1]]))
    stats.add_mean("entropy", 3.0, 1)
    stats.add_mean("entropy", 1.0, 3)  # (3 + 3) / 4 = 1.5
    stats.add_count("clip_count", 1)
    stats.add_count("clip_count", 2)
    stats.add_count("clip_total", 12)
    stats.ratio("clip_fraction", "clip_count", "clip_total")
    result = stats.compute(all_reduce=False)
    assert result["kl"] == pytest.approx(1.0)
    assert result["entropy"] == pytest.approx(1.5)
    assert result["clip_count"] == 3 and result["clip_total"] == 12
    assert result["clip_fraction"] == pytest.approx(0.25)


def test_compare_logprobs_hand_worked():
    # δ = trainer − sampler = ln 2, −ln 2, 0 (and a masked token that differs by 5)
    # |δ|: mean (2 ln 2) / 3 = 0.46209812037329684, max ln 2
    # per token e^δ − 1 − δ (k3 of KL(sampler‖trainer) from the sampler's samples):
    #   1 − ln 2, ln 2 − 1/2, 0  -> mean (1/2) / 3
    sampler = torch.log(torch.tensor([[0.25, 0.5, 0.3, 0.1]], dtype=F64))
    trainer = torch.log(torch.tensor([[0.5, 0.25, 0.3, 0.1]], dtype=F64))
    trainer[0, 3] += 5.0
    result = compare_logprobs(sampler, trainer, torch.tensor([[1, 1, 1, 0]]))
    assert result["logprob_diff_mean"] == pytest.approx(2 * math.log(2) / 3, rel=1e-12)
    assert result["logprob_diff_max"] == pytest.approx(math.log(2), rel=1e-12)
    assert result["reverse_kl"] == pytest.approx(0.5 / 3, rel=1e-12)


def test_compare_logprobs_kl_is_exact_on_an_enumerated_sample():
    # q = (1/2, 1/4, 1/4) enumerated as the four equally likely samples x0 x0 x1 x2; the token mean
    # is then E_q, and the estimator's expectation is KL(q‖p) exactly
    q = torch.tensor([0.5, 0.25, 0.25], dtype=F64)
    p = torch.tensor([0.2, 0.5, 0.3], dtype=F64)
    samples = torch.tensor([[0, 0, 1, 2]])
    result = compare_logprobs(q.log()[samples], p.log()[samples], torch.ones(1, 4))
    assert result["reverse_kl"] == pytest.approx((q * (q.log() - p.log())).sum().item(), rel=1e-12)


def test_compare_logprobs_shape_mismatch_raises():
    with pytest.raises(ValueError, match="sampler_log_probs|trainer_log_probs|response_mask"):
        compare_logprobs(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 4))
