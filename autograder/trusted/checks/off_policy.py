"""Checks for stage 5: `estimate_kl`, `truncated_importance_weights`, `compute_grpo_loss`."""

from __future__ import annotations

import math

import torch

from autograder.protocol.markers import config_marker
from autograder.trusted.checks.common import (
    generator,
    ragged_mask,
    reference_gradient,
    run_reference,
)
from autograder.trusted.core import (
    VALUES,
    Fail,
    Mistake,
    bounds,
    case,
    check,
    close,
    compare,
    item,
    judge_cases,
    tensor,
)
from course.off_policy import GRPO_LOSS_FNS
from course.variants import KL_ESTIMATORS

GRPO = "compute_grpo_loss"
KL = "estimate_kl"
TIS = "truncated_importance_weights"


# ---- estimate_kl -------------------------------------------------------------------------------
@case(f"{KL}/batch", expected=lambda inputs: {
    "values": torch.stack([run_reference(KL, {**inputs, "estimator": k}).detach()
                           for k in KL_ESTIMATORS]),
    "k3_grad": reference_gradient(KL, {**inputs, "estimator": "k3"}, "new_logprobs", None,
                                   torch.ones_like(inputs["new_logprobs"]))})
def make_kl(seed: int) -> dict:
    g = generator(seed + 200)
    new = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    ref = new + torch.randn(3, 5, generator=g, dtype=torch.float64) * 0.8
    return {"new_logprobs": new, "ref_logprobs": ref,
            "ratio": torch.rand(3, 5, generator=g, dtype=torch.float64) + 0.5}


# ratio·δ with δ taken in float32 and the ratio kept in float64 is a float64 answer that carries
# δ's float32 rounding, ≤ 2^-24·r·(|log π| + |log π_ref|) (IEEE 754 rounding of the two inputs;
# Higham §1.7), 3.6e-7 at most on fresh seeds 0-499: more than the float64 atol where δ is
# small, and `bounds` widens only answers made entirely of float32 numbers. Such an answer is
# accepted as the reference's on the log-probs rounded to float32: ratio_k1 = r·δ (B, T) is
# linear in δ, so that answer is the stored one moved by r·(δ₃₂ − δ) exactly, and the
# subtraction's own float32 rounding (2^-24·|δ|) is inside rtol. The known mistakes (δ/r, δ)
# still miss it by O(δ) (benchmarks/README.md, "Float32 answers to float64 cases").
def _rounded_delta(inputs: dict) -> torch.Tensor:
    """δ of log-probs rounded to float32, computed exactly in float64 (B, T)."""
    return inputs["new_logprobs"].float().double() - inputs["ref_logprobs"].float().double()


def _matches(got, expected: torch.Tensor) -> bool:
    """`got` is a tensor within the float64 tolerance (widened as `compare` does) of `expected`."""
    if type(got) is not torch.Tensor:
        return False
    return close(got, expected, *bounds(VALUES, got, expected))


@check(KL, "k1, k2, k3 and ratio·δ match (δ = log π − log π_ref)", points=2)
def kl_values(ctx) -> None:
    def judge(run):
        delta = run.inputs["new_logprobs"] - run.inputs["ref_logprobs"]
        ratio = run.inputs["ratio"]
        mistakes = {"k1": [Mistake("δ with the sign reversed (log π_ref − log π)", "δ = log π − "
                                                                                   "log π_ref",
                                lambda: -delta)],
                    "k2": [Mistake("k2 without the 1/2", "k2 = δ²/2", lambda: delta ** 2)],
                    "k3": [Mistake("k3 with the sign of δ reversed (exp(δ) − 1 − δ)",
                                "k3 = exp(−δ) − 1 + δ with δ = log π − log π_ref",
                                   lambda: delta.exp() - 1 - delta),
                        Mistake("exp(δ) − 1 + δ", "k3 = exp(−δ) − 1 + δ",
                                lambda: delta.exp() - 1 + delta)],
                    "ratio_k1": [Mistake("δ / ratio instead of ratio·δ", "ratio_k1 is ratio·δ",
                                         lambda: delta / ratio),
                                 Mistake("k1 without the ratio", "ratio_k1 is ratio·δ",
                                         lambda: delta)]}
        for index, k in enumerate(KL_ESTIMATORS):
            got = ctx.call(KL, {**run.inputs, "estimator": k})["output"]
            expected = run.expected["values"][index]
            if k == "ratio_k1" and _matches(got, expected + ratio * (_rounded_delta(run.inputs)
                                                                      - delta)):
                continue
            compare(got, expected, f"estimator {k!r}", mistakes[k])
    judge_cases(ctx, f"{KL}/batch", judge)


@check(KL, "gradient flows through new_logprobs", points=1)
def kl_gradient(ctx) -> None:
    run = ctx.fresh_case(f"{KL}/batch")
    inputs = run.inputs
    response = ctx.call(KL, {**inputs, "estimator": "k3"}, grad_wrt=["new_logprobs"],
                        backward={"path": "", "cotangent": torch.ones(3, 5, dtype=torch.float64)})
    grad = response.get("grads", {}).get("new_logprobs")
    if grad is None:
        raise Fail("k3 has no gradient with respect to new_logprobs (detached or computed under "
                   "no_grad?)")
    compare(grad, run.expected["k3_grad"], "d k3 / d log π")


# ---- truncated_importance_weights --------------------------------------------------------------
@case(f"{TIS}/batch", expected=lambda inputs: run_reference(TIS, inputs))
def make_tis(seed: int) -> dict:
    g = generator(seed + 300)
    old = -torch.rand(3, 6, generator=g, dtype=torch.float64) * 3
    sampler = old + torch.randn(3, 6, generator=g, dtype=torch.float64) * 0.7
    return {"old_log_probs": old, "sampler_log_probs": sampler, "cap": 1.5,
            "response_mask": ragged_mask(3, 6, g)}


@check(TIS, "exp(old − sampler) capped above at `cap`, 0 off the mask", points=2)
def tis_values(ctx) -> None:
    def judge(run):
        log_w = run.inputs["old_log_probs"] - run.inputs["sampler_log_probs"]
        mask = run.inputs["response_mask"].double()
        got = ctx.call(TIS, run.inputs)["output"]
        compare(got, run.expected, "truncated importance weights", [
            Mistake("the ratio inverted (exp(sampler − old))", "w = exp(old_log_probs − "
                                                               "sampler_log_probs)",
                    lambda: (-log_w).exp().clamp(max=1.5) * mask),
            Mistake("clamped from below instead of above", "w = min(exp(δ), cap)",
                    lambda: log_w.exp().clamp(min=1.5) * mask),
            Mistake("the mask ignored", "set masked-out positions to 0",
                    lambda: log_w.exp().clamp(max=1.5))])
    judge_cases(ctx, f"{TIS}/batch", judge)


@check(TIS, "the weights carry no gradient", points=1,
       paid_with="exp(old − sampler) capped above at `cap`, 0 off the mask")
def tis_no_grad(ctx) -> None:
    inputs = make_tis(ctx.grader.seed)
    response = ctx.call(TIS, inputs, grad_wrt=["old_log_probs"])
    if response["requires_grad"].get("", False):
        raise Fail("the weights require grad: they are a fixed correction, compute them under "
                   "torch.no_grad() or detach them")
    if not math.isfinite(float(tensor(response["output"], "weights").double().sum())):
        raise Fail("the weights are not finite")


# ---- compute_grpo_loss (open-instruct form) ---------------------------------------------------
def _grpo_inputs(seed: int) -> dict:
    g = generator(seed + 100)
    new = -torch.rand(3, 6, generator=g, dtype=torch.float64) * 2 - 0.1
    old = new + torch.randn(3, 6, generator=g, dtype=torch.float64) * 0.35
    ref = new + torch.randn(3, 6, generator=g, dtype=torch.float64) * 0.5
    advantages = torch.randn(3, 1, generator=g, dtype=torch.float64).expand(3, 6).clone()
    return {"new_logprobs": new, "ratio": (new - old).exp(), "advantages": advantages,
            "ref_logprobs": ref,
            "tis_weights": torch.rand(3, 6, generator=g, dtype=torch.float64) * 2}


def _config(loss_fn: str) -> dict:
    return config_marker(loss_fn=loss_fn, clip_lower=0.2, clip_higher=0.28, kl_estimator="k3",
                         beta=0.1)


def _grpo_expected(inputs: dict) -> dict:
    out = {}
    for loss_fn in GRPO_LOSS_FNS:
        out[loss_fn] = torch.stack(
            [t.detach() for t in run_reference(GRPO, {**inputs, "config": _config(loss_fn)})]
        )
    out["cispo/grad"] = reference_gradient(GRPO, {**inputs, "config": _config("cispo")},
                                           "new_logprobs", 2,
                                            # d pg_loss_max / d log π
                                            torch.ones_like(inputs["new_logprobs"]))
    return out


@case(f"{GRPO}/batch", expected=_grpo_expected)
def make_grpo(seed: int) -> dict:
    return _grpo_inputs(seed)


def _grpo_call(ctx, inputs, loss_fn, **options):
    response = ctx.call(GRPO, {**inputs, "config": _config(loss_fn)}, **options)
    output = response["output"]
    return response, [tensor(item(output, i, 4, f"the result of {GRPO}"), name)
                      for i, name in enumerate(("pg_losses", "pg_losses2", "pg_loss_max", "kl"))]


@check(GRPO, "dapo: −A·r, −A·clip(r, 1−clip_lower, 1+clip_higher), their max, TIS on the max "
             "only", points=2)
def grpo_dapo(ctx) -> None:
    def judge(run):
        _, got = _grpo_call(ctx, run.inputs, "dapo")
        a, r, tis = run.inputs["advantages"], run.inputs["ratio"], run.inputs["tis_weights"]
        expected = run.expected["dapo"]
        compare(got[0], expected[0], "pg_losses")
        compare(got[1], expected[1], "pg_losses2", [
            Mistake("clip_lower and clip_higher swapped", "clip(r, 1 − clip_lower, 1 + "
                                                          "clip_higher)",
                    lambda: -a * r.clamp(1 - 0.28, 1 + 0.2)),
            Mistake("one symmetric bound (clip_lower) on both sides", "use clip_higher for the "
                                                                      "upper bound",
                    lambda: -a * r.clamp(1 - 0.2, 1 + 0.2))])
        compare(got[2], expected[2], "pg_loss_max", [
            Mistake("min instead of max of the two losses", "pg_loss_max = max(pg_losses, "
                                                            "pg_losses2)",
                    lambda: torch.minimum(expected[0], expected[1]) * tis),
            Mistake("tis_weights not applied", "multiply pg_loss_max by tis_weights",
                    lambda: torch.maximum(expected[0], expected[1]))])
        compare(got[3], expected[3], "kl", [
            Mistake("tis_weights applied to the KL too", "TIS weights multiply pg_loss_max, never "
                                                         "the KL",
                    lambda: expected[3] * tis)])
    judge_cases(ctx, f"{GRPO}/batch", judge)


@check(GRPO, "cispo: −A·sg(min(r, 1+clip_higher))·log π, the weight detached", points=2)
def grpo_cispo(ctx) -> None:
    def judge(run):
        cotangent = torch.ones(3, 6, dtype=torch.float64)
        response, got = _grpo_call(ctx, run.inputs, "cispo", grad_wrt=["ratio", "new_logprobs"],
                                   backward={"path": "2", "cotangent": cotangent})
        expected = run.expected["cispo"]
        for i, name in enumerate(("pg_losses", "pg_losses2")):
            compare(got[i], expected[i], name, [
                Mistake("the DAPO clipped loss for loss_fn='cispo'", "cispo: −A·sg(min(r, "
                                                                     "1+clip_higher))·log π",
                        lambda: run.expected["dapo"][1])])
        compare(got[2], expected[2], "pg_loss_max")
        ratio_grad = response.get("grads", {}).get("ratio")
        if ratio_grad is not None and float(ratio_grad.abs().max()) > 0:
            raise Fail("pg_loss_max has a gradient with respect to ratio: this looks like the "
                       "CISPO weight "
                       "not detached; fix: weight = torch.clamp(ratio, max=1 + "
                       "clip_higher).detach()")
        grad = response.get("grads", {}).get("new_logprobs")
        if grad is None:
            raise Fail("the CISPO loss has no gradient with respect to new_logprobs")
        compare(grad, run.expected["cispo/grad"], "d pg_loss_max / d new_logprobs")
    judge_cases(ctx, f"{GRPO}/batch", judge)


@check(GRPO, "kl is zeros when ref_logprobs is None", points=1,
       paid_with="dapo: −A·r, −A·clip(r, 1−clip_lower, 1+clip_higher), their max, TIS on the max "
                 "only")
def grpo_no_ref(ctx) -> None:
    inputs = {**_grpo_inputs(5), "ref_logprobs": None}
    _, got = _grpo_call(ctx, inputs, "dapo")
    compare(got[3], torch.zeros(3, 6, dtype=torch.float64), "kl without ref_logprobs")
