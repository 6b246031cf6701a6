"""grpo_train_step with a `FrontierLoss` (SAPO, GMPO, dual clip, floored CISPO, DPPO's trust region,
the ratio against the sampler, the outlier mask): the update is −∇L of the naive full-batch objective
(naive.frontier_loss: token by token, float64) for K = 1, 2, 3, 4 micro-batches, to 1e-10.

Each case also checks that its option acts on this batch: the naive objective without it has another
gradient (a dual clip that no token reaches, say, would pass the first check vacuously).
"""

import pytest
import torch
from naive import (
    full_batch_loss,
    gradient,
    make_old_log_probs,
    make_rollout_batch,
    relative_difference,
)
from test_train_step_grpo_loss import normalization, sgd_step

from course.frontier.loss import FrontierLoss

pytestmark = pytest.mark.usefixtures("single_thread")

KL_BETA, TIS_CAP, CONSTANT = 0.5, 1.2, 40.0
# probabilities here are near 1/103 (the character vocabulary): a trust region of 0.002 acts
# (name, FrontierLoss fields, normalization, KL?, TIS?, the fields that must act on this batch)
CASES = [
    ("ppo-dual-clip", dict(loss_fn="dapo", clip_lower=0.2, clip_higher=0.28, dual_clip=1.3),
     "token", True, True, dict(dual_clip=None)),
    ("cispo-floor", dict(loss_fn="cispo", clip_lower=0.1, clip_higher=0.2, cispo_floor=True),
     "sequence", False, False, dict(cispo_floor=False)),
    ("sapo", dict(loss_fn="sapo", tau_pos=1.0, tau_neg=1.05), "constant", False, True,
     dict(loss_fn="dapo")),
    ("gmpo", dict(loss_fn="gmpo", clip_lower=0.1, clip_higher=0.1), "sequence", True, False,
     dict(clip_lower=10.0, clip_higher=10.0)),
    ("dppo-sampler", dict(loss_fn="dppo", trust_region=0.002, ratio_kl=1e-3,
                          ratio_against="sampler"), "token", False, True,
     dict(trust_region=10.0)),
    ("sapo-sampler-outlier", dict(loss_fn="sapo", ratio_against="sampler", outlier_low=0.8,
                                  outlier_high=1.25), "token", True, True,
     dict(outlier_low=None, outlier_high=None)),
]
NAIVE_FIELDS = ("clip_lower", "clip_higher", "dual_clip", "cispo_floor", "tau_pos", "tau_neg",
                "trust_region", "ratio_kl", "outlier_low", "outlier_high")


def extras(model, batch, tokenizer, kl: bool, tis: bool) -> dict:
    found = {}
    if kl:
        found["ref_log_probs"] = make_old_log_probs(model, batch, tokenizer, seed=1, scale=0.5)
    if tis:
        found.update(sampler_log_probs=make_old_log_probs(model, batch, tokenizer, seed=2),
                     tis_cap=TIS_CAP)
    return found


def naive_update(model, tokenizer, batch, old, config: FrontierLoss, mode, extra) -> list:
    """−∇ of the naive objective for `config`; TIS weights only against π_old."""
    extra = dict(extra)
    sampler = extra.pop("sampler_log_probs", None)
    tis_cap = extra.pop("tis_cap", 2.0)
    against_sampler = config.ratio_against == "sampler"
    frontier = {name: getattr(config, name) for name in NAIVE_FIELDS}
    frontier["base"] = (sampler if sampler is not None else old) if against_sampler else old
    loss = full_batch_loss(model, tokenizer, batch, config.loss_fn, mode, old, constant=CONSTANT,
                           normalizer="none", kl_beta=config.beta, kl_estimator=config.kl_estimator,
                           sampler_log_probs=None if against_sampler else sampler, tis_cap=tis_cap,
                           frontier=frontier, **extra)
    return [-g for g in gradient(model, [loss])]


@pytest.mark.parametrize("name, fields, mode, kl, tis, off", CASES, ids=[c[0] for c in CASES])
def test_update_is_the_full_batch_gradient_for_every_split(make_model, tokenizer, name, fields,
                                                            mode, kl, tis, off):
    batch = make_rollout_batch(zero_advantage_group=kl)
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    extra = extras(model, batch, tokenizer, kl, tis)
    config = FrontierLoss(**fields, beta=KL_BETA if kl else 0.0)
    expected = naive_update(model, tokenizer, batch, old, config, mode, extra)
    assert max(g.abs().max() for g in expected) > 1e-4  # not vacuous
    without = FrontierLoss(**{**fields, **off}, beta=config.beta)
    assert relative_difference(naive_update(model, tokenizer, batch, old, without, mode, extra),
                               expected) > 1e-6, "the option does not act on this batch"
    for gas in (1, 2, 3, 4):
        update, metadata = sgd_step(make_model(torch.float64), tokenizer, batch, gas,
                                    old_log_probs=old, grpo_loss=config, **normalization(mode),
                                    **extra)
        assert relative_difference(update, expected) < 1e-10, f"{gas=}"
        assert ("kl_mean" in metadata) == kl
        assert 0 <= float(metadata["clip_fraction"]) <= 1


@pytest.mark.parametrize("change, argument", [
    ({"grpo_loss": FrontierLoss(beta=0.1)}, "grpo_loss.beta > 0 needs"),
    ({"grpo_loss": FrontierLoss(), "pg_method": "grpo", "cliprange": 0.2}, "pg_method must be"),
])
def test_bad_frontier_arguments_raise_naming_them(make_model, tokenizer, change, argument):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    with pytest.raises(ValueError, match=argument):
        sgd_step(model, tokenizer, batch, 2,
                 old_log_probs=make_old_log_probs(model, batch, tokenizer), **change)
