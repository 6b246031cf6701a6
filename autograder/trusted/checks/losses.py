"""Checks for stage 4: policy-gradient losses, `compute_grpo_loss`, `estimate_kl`, TIS weights."""

from __future__ import annotations

import math

import torch

from autograder.protocol.markers import config_marker
from autograder.trusted.checks.common import generator, ragged_mask, run_reference
from autograder.trusted.core import (
    Fail,
    Mistake,
    case,
    check,
    compare,
    compare_scalar,
    field,
    item,
    judge_cases,
    tensor,
)
from course.losses import GRPO_LOSS_FNS, KL_ESTIMATORS, PG_METHODS

PG = "compute_policy_gradient_loss"
GRPO = "compute_grpo_loss"
KL = "estimate_kl"
TIS = "truncated_importance_weights"
EPS = 0.2


def _policy(seed: int, batch: int = 4, positions: int = 7) -> dict:
    g = generator(seed)
    log_probs = -torch.rand(batch, positions, generator=g, dtype=torch.float64) * 3 - 0.05
    old = log_probs + torch.randn(batch, positions, generator=g, dtype=torch.float64) * 0.3
    advantages = torch.randn(batch, generator=g, dtype=torch.float64)
    advantages[0], advantages[1] = abs(advantages[0]) + 0.1, -abs(advantages[1]) - 0.1
    return {"raw_rewards_or_advantages": advantages, "policy_log_probs": log_probs,
            "old_log_probs": old, "response_mask": ragged_mask(batch, positions, g)}


def _reference_gradient(name: str, inputs: dict, wrt: str, path, cotangent: torch.Tensor) -> torch.Tensor:
    """d<output[path] · cotangent>/d inputs[wrt] of the reference, by autograd (stored with the
    case, so that no check holds a formula of its own for it)."""
    leaf = inputs[wrt].detach().clone().requires_grad_(True)
    output = run_reference(name, {**inputs, wrt: leaf})
    output = output[path] if path is not None else output
    (grad,) = torch.autograd.grad((output * cotangent).sum(), leaf)
    return grad.detach()


def _pg_expected(inputs: dict) -> dict:
    out = {}
    for method in PG_METHODS:
        loss, metadata = run_reference(PG, {**inputs, "pg_method": method,
                                            "cliprange": EPS})
        out[method] = {"loss": loss.detach(), "metadata": {k: torch.as_tensor(v).double()
                                                           for k, v in metadata.items()}}
    # d(Σ mask · loss)/d log π of CISPO: the weight is detached, so -min(r, 1+ε)·A on the mask
    out["cispo"]["grad"] = _reference_gradient(
        PG, {**inputs, "pg_method": "cispo", "cliprange": EPS},
        "policy_log_probs", 0, inputs["response_mask"].double())
    return out


@case(f"{PG}/batch", expected=_pg_expected)
def make_pg(seed: int) -> dict:
    return _policy(seed)


def _parts(inputs: dict):
    a = inputs["raw_rewards_or_advantages"].reshape(-1, 1)
    ratio = (inputs["policy_log_probs"] - inputs["old_log_probs"]).exp()
    return a, ratio, inputs["response_mask"].double()


def _pg_mistakes(method: str, inputs: dict, expected: dict) -> list:
    a, r, mask = _parts(inputs)
    clipped = r.clamp(1 - EPS, 1 + EPS)
    log_ratio = (inputs["policy_log_probs"] - inputs["old_log_probs"]) * mask
    lengths = mask.sum(1, keepdim=True).clamp_min(1)
    T = mask.shape[1]

    def gspo(seq_log_ratio):
        s = seq_log_ratio.exp()
        return (-torch.minimum(s * a, s.clamp(1 - EPS, 1 + EPS) * a)).expand_as(r)
    mistakes = {
        "noclip": [Mistake("the ratio inverted (π_old/π)", "r = exp(log π − log π_old)", lambda: -a / r),
                   Mistake("A·log π instead of A·ratio", "noclip weights A by r = exp(log π − log π_old)",
                           lambda: expected["none"]["loss"])],
        "grpo": [Mistake("max instead of min in the clipped objective",
                         "loss = −min(r·A, clip(r, 1−ε, 1+ε)·A)", lambda: -torch.maximum(r * a, clipped * a)),
                 Mistake("the clipped term alone (no min with the unclipped one)",
                         "take −min(r·A, clip(r)·A): clipping may only remove gradient, never add it",
                         lambda: -clipped * a)],
        "gspo": [Mistake("GSPO as a product of token ratios instead of their geometric mean",
                         "s = exp(mean over response tokens of log r), not exp(sum)",
                         lambda: gspo(log_ratio.sum(1, keepdim=True))),
                 Mistake("the mean log-ratio taken over all T positions (padding included)",
                         "average log r over the response tokens only (masked mean)",
                         lambda: gspo(log_ratio.sum(1, keepdim=True) / T)),
                 Mistake("token-level clipping (GRPO) instead of one sequence ratio",
                         "GSPO clips one geometric-mean ratio per sequence",
                         lambda: expected["grpo"]["loss"]),
                 Mistake("the arithmetic mean of token ratios",
                         "use the geometric mean: exp(masked mean of log r)",
                         lambda: gspo(((r * mask).sum(1, keepdim=True) / lengths).log()))],
        "cispo": [Mistake("the PPO clipped loss instead of CISPO's weighted log π",
                          "loss = −sg(min(r, 1+ε))·A·log π",
                          lambda: expected["grpo"]["loss"]),
                  Mistake("the weight clipped on both sides", "CISPO caps the weight only above: min(r, 1+ε)",
                          lambda: -clipped * a * inputs["policy_log_probs"])],
    }
    return mistakes.get(method, [])


def _pg_judge(ctx, method: str, run, extra=None) -> dict:
    kwargs = {**run.inputs, "pg_method": method, "cliprange": EPS}
    if method == "none":
        kwargs.pop("old_log_probs")
    response = ctx.call(PG, kwargs, **(extra or {}))
    output = response["output"]
    loss = tensor(item(output, 0, 2, f"the result of {PG}"), "per-token loss")
    expected = run.expected[method]["loss"]
    mask = run.inputs["response_mask"].bool()
    # positions off the mask are free (the aggregation ignores them), except for shape
    if tuple(loss.shape) == tuple(expected.shape):
        loss = torch.where(mask, loss.double(), expected)
    mistakes = [Mistake(m.label, m.fix, lambda m=m: torch.where(mask, m.answer().double(), expected))
                for m in _pg_mistakes(method, run.inputs, run.expected)]
    compare(loss, expected, f"{method} per-token loss (on response tokens)", mistakes)
    return response


def _pg_gradient(ctx, method: str, run, wrt: str):
    """Judge `method`'s values, then return d(Σ masked loss)/d`wrt` (None when no gradient reaches it)."""
    cotangent = run.inputs["response_mask"].double()
    response = _pg_judge(ctx, method, run, {"grad_wrt": [wrt], "backward": {"path": "0", "cotangent": cotangent}})
    return response.get("grads", {}).get(wrt)


@check(PG, "none: −A·log π", points=1)
def pg_none(ctx) -> None:
    judge_cases(ctx, f"{PG}/batch", lambda run: _pg_judge(ctx, "none", run))


@check(PG, "noclip: −A·r with r = exp(log π − sg(log π_old))", points=1)
def pg_noclip(ctx) -> None:
    def judge(run):
        grad = _pg_gradient(ctx, "noclip", run, "old_log_probs")
        if grad is not None and float(grad.abs().max()) > 0:
            raise Fail("the loss has a gradient with respect to old_log_probs: this looks like log π_old "
                       "not detached; fix: r = exp(log π − old_log_probs.detach())")
    judge_cases(ctx, f"{PG}/batch", judge)


@check(PG, "grpo: −min(r·A, clip(r, 1−ε, 1+ε)·A)", points=1)
def pg_grpo(ctx) -> None:
    judge_cases(ctx, f"{PG}/batch", lambda run: _pg_judge(ctx, "grpo", run))


@check(PG, "masked positions never leak into the gradient, even when they hold inf or nan", points=1)
def pg_masked_inputs(ctx) -> None:
    """Selecting the loss after exp keeps its value finite, but backward through exp of an inf or
    nan at a masked position is 0·∞ = nan: the inputs must be masked before the ratio."""
    run = ctx.fresh_case(f"{PG}/batch")
    mask = run.inputs["response_mask"].bool()
    poisoned = run.inputs["old_log_probs"].clone()
    for number, (row, column) in enumerate((~mask).nonzero().tolist()):
        poisoned[row, column] = (math.nan, math.inf, -math.inf)[number % 3]
    cotangent = mask.double()
    for method in ("noclip", "grpo", "gspo", "cispo"):
        kwargs = {**run.inputs, "pg_method": method, "cliprange": EPS}
        expected = _reference_gradient(PG, kwargs, "policy_log_probs", 0, cotangent)
        response = ctx.call(PG, {**kwargs, "old_log_probs": poisoned}, grad_wrt=["policy_log_probs"],
                            backward={"path": "0", "cotangent": cotangent})
        grad = response.get("grads", {}).get("policy_log_probs")
        if grad is None:
            raise Fail(f"{method}: the loss has no gradient with respect to policy_log_probs")
        if not torch.isfinite(grad).all():
            raise Fail(f"{method}: with inf/nan in old_log_probs at masked-out positions the gradient "
                       "holds nan: selecting the loss afterwards keeps its value finite, but backward "
                       "through exp(nan) or exp(inf) is 0·∞ = nan; fix: select the inputs with "
                       "torch.where(mask, old_log_probs, 0) (and log π) BEFORE computing the ratio")
        compare(grad, expected, f"{method}: d(Σ masked loss)/d log π with inf/nan at masked-out positions")


def _clip_mistakes(inputs: dict, key: str) -> list:
    a, r, mask = _parts(inputs)
    total = mask.sum()
    outside = ((r > 1 + EPS) | (r < 1 - EPS)).double()
    wrong_side = (((a < 0) & (r > 1 + EPS)) | ((a > 0) & (r < 1 - EPS))).double()
    right = (((a > 0) & (r > 1 + EPS)) | ((a < 0) & (r < 1 - EPS))).double()

    def value(counted):
        return (counted * mask).sum() / (total if key == "clip_fraction" else 1)
    return [
        Mistake("clip counted on the wrong side (A>0 with r<1−ε, or A<0 with r>1+ε)",
                "count a token where clipping removes its gradient: A>0 and r>1+ε, or A<0 and r<1−ε",
                lambda: value(wrong_side)),
        Mistake("every ratio outside [1−ε, 1+ε] counted as clipped, whatever the sign of A",
                "count only where clipping removes the gradient (depends on the sign of A)",
                lambda: value(outside)),
        Mistake("padding positions counted", "count over response tokens only (use response_mask)",
                lambda: (right.sum() / (r.numel() if key == "clip_fraction" else 1))),
    ]


@check(PG, "grpo: clip_fraction/clip_count count tokens whose gradient clipping removes", points=1)
def pg_clip_metadata(ctx) -> None:
    def judge(run):
        metadata = item(_pg_judge(ctx, "grpo", run)["output"], 1, 2, "the result")
        for key in ("clip_count", "clip_fraction", "clip_total"):
            compare_scalar(field(metadata, key, "grpo metadata"), float(run.expected["grpo"]["metadata"][key]),
                           f"metadata[{key!r}]", _clip_mistakes(run.inputs, key))
    judge_cases(ctx, f"{PG}/batch", judge)


@check(PG, "gspo: one geometric-mean ratio per sequence, clipped, broadcast over tokens", points=2)
def pg_gspo(ctx) -> None:
    judge_cases(ctx, f"{PG}/batch", lambda run: _pg_judge(ctx, "gspo", run))


@check(PG, "cispo: −sg(min(r, 1+ε))·A·log π, the weight detached", points=2)
def pg_cispo(ctx) -> None:
    def judge(run):
        cotangent = run.inputs["response_mask"].double()
        grad = _pg_gradient(ctx, "cispo", run, "policy_log_probs")
        a, r, mask = _parts(run.inputs)
        expected = run.expected["cispo"]["grad"]
        if grad is None:
            raise Fail("the CISPO loss has no gradient with respect to policy_log_probs")
        # with the weight attached, d/d log π gains −A·r·log π wherever r < 1+ε (d r/d log π = r)
        attached = expected + torch.where(r < 1 + EPS, -a * r * run.inputs["policy_log_probs"], 0) * cotangent
        compare(grad, expected, "the gradient of the CISPO loss with respect to log π", [
            Mistake("the CISPO weight not detached (gradient also flows through min(r, 1+ε))",
                    "detach the weight: torch.clamp(ratio, max=1+ε).detach()", lambda: attached)])
    judge_cases(ctx, f"{PG}/batch", judge)


@check(PG, "missing old_log_probs or cliprange raise ValueError", points=1,
       paid_with="grpo: −min(r·A, clip(r, 1−ε, 1+ε)·A)")
def pg_bad_input(ctx) -> None:
    inputs = _policy(3)
    for method, drop in (("grpo", "old_log_probs"), ("grpo", "cliprange"), ("noclip", "old_log_probs")):
        kwargs = {**inputs, "pg_method": method, "cliprange": EPS}
        kwargs.pop(drop)
        response = ctx.outcome(PG, kwargs)
        if response.get("status") == "ok" or not response.get("is_value_error"):
            raise Fail(f"{method} without {drop} should raise ValueError, got "
                       + ("a result" if response.get("status") == "ok" else str(response.get("error_type"))))


# ---- compute_grpo_loss (open-instruct form) ---------------------------------------------------
def _grpo_inputs(seed: int) -> dict:
    g = generator(seed + 100)
    new = -torch.rand(3, 6, generator=g, dtype=torch.float64) * 2 - 0.1
    old = new + torch.randn(3, 6, generator=g, dtype=torch.float64) * 0.35
    ref = new + torch.randn(3, 6, generator=g, dtype=torch.float64) * 0.5
    advantages = torch.randn(3, 1, generator=g, dtype=torch.float64).expand(3, 6).clone()
    return {"new_logprobs": new, "ratio": (new - old).exp(), "advantages": advantages, "ref_logprobs": ref,
            "tis_weights": torch.rand(3, 6, generator=g, dtype=torch.float64) * 2}


def _config(loss_fn: str) -> dict:
    return config_marker(loss_fn=loss_fn, clip_lower=0.2, clip_higher=0.28, kl_estimator="k3", beta=0.1)


def _grpo_expected(inputs: dict) -> dict:
    out = {}
    for loss_fn in GRPO_LOSS_FNS:
        out[loss_fn] = torch.stack([t.detach() for t in run_reference(GRPO, {**inputs, "config": _config(loss_fn)})])
    out["cispo/grad"] = _reference_gradient(GRPO, {**inputs, "config": _config("cispo")}, "new_logprobs", 2,
                                            torch.ones_like(inputs["new_logprobs"]))  # d pg_loss_max / d log π
    return out


@case(f"{GRPO}/batch", expected=_grpo_expected)
def make_grpo(seed: int) -> dict:
    return _grpo_inputs(seed)


def _grpo_call(ctx, inputs, loss_fn, **options):
    response = ctx.call(GRPO, {**inputs, "config": _config(loss_fn)}, **options)
    output = response["output"]
    return response, [tensor(item(output, i, 4, f"the result of {GRPO}"), name)
                      for i, name in enumerate(("pg_losses", "pg_losses2", "pg_loss_max", "kl"))]


@check(GRPO, "dapo: −A·r, −A·clip(r, 1−clip_lower, 1+clip_higher), their max, TIS on the max only", points=2)
def grpo_dapo(ctx) -> None:
    def judge(run):
        _, got = _grpo_call(ctx, run.inputs, "dapo")
        a, r, tis = run.inputs["advantages"], run.inputs["ratio"], run.inputs["tis_weights"]
        expected = run.expected["dapo"]
        compare(got[0], expected[0], "pg_losses")
        compare(got[1], expected[1], "pg_losses2", [
            Mistake("clip_lower and clip_higher swapped", "clip(r, 1 − clip_lower, 1 + clip_higher)",
                    lambda: -a * r.clamp(1 - 0.28, 1 + 0.2)),
            Mistake("one symmetric bound (clip_lower) on both sides", "use clip_higher for the upper bound",
                    lambda: -a * r.clamp(1 - 0.2, 1 + 0.2))])
        compare(got[2], expected[2], "pg_loss_max", [
            Mistake("min instead of max of the two losses", "pg_loss_max = max(pg_losses, pg_losses2)",
                    lambda: torch.minimum(expected[0], expected[1]) * tis),
            Mistake("tis_weights not applied", "multiply pg_loss_max by tis_weights",
                    lambda: torch.maximum(expected[0], expected[1]))])
        compare(got[3], expected[3], "kl", [
            Mistake("tis_weights applied to the KL too", "TIS weights multiply pg_loss_max, never the KL",
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
                Mistake("the DAPO clipped loss for loss_fn='cispo'", "cispo: −A·sg(min(r, 1+clip_higher))·log π",
                        lambda: run.expected["dapo"][1])])
        compare(got[2], expected[2], "pg_loss_max")
        ratio_grad = response.get("grads", {}).get("ratio")
        if ratio_grad is not None and float(ratio_grad.abs().max()) > 0:
            raise Fail("pg_loss_max has a gradient with respect to ratio: this looks like the CISPO weight "
                       "not detached; fix: weight = torch.clamp(ratio, max=1 + clip_higher).detach()")
        grad = response.get("grads", {}).get("new_logprobs")
        if grad is None:
            raise Fail("the CISPO loss has no gradient with respect to new_logprobs")
        compare(grad, run.expected["cispo/grad"], "d pg_loss_max / d new_logprobs")
    judge_cases(ctx, f"{GRPO}/batch", judge)


@check(GRPO, "kl is zeros when ref_logprobs is None", points=1,
       paid_with="dapo: −A·r, −A·clip(r, 1−clip_lower, 1+clip_higher), their max, TIS on the max only")
def grpo_no_ref(ctx) -> None:
    inputs = {**_grpo_inputs(5), "ref_logprobs": None}
    _, got = _grpo_call(ctx, inputs, "dapo")
    compare(got[3], torch.zeros(3, 6, dtype=torch.float64), "kl without ref_logprobs")


# ---- estimate_kl -------------------------------------------------------------------------------
@case(f"{KL}/batch", expected=lambda inputs: {
    "values": torch.stack([run_reference(KL, {**inputs, "estimator": k}).detach() for k in KL_ESTIMATORS]),
    "k3_grad": _reference_gradient(KL, {**inputs, "estimator": "k3"}, "new_logprobs", None,
                                   torch.ones_like(inputs["new_logprobs"]))})
def make_kl(seed: int) -> dict:
    g = generator(seed + 200)
    new = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    ref = new + torch.randn(3, 5, generator=g, dtype=torch.float64) * 0.8
    return {"new_logprobs": new, "ref_logprobs": ref,
            "ratio": torch.rand(3, 5, generator=g, dtype=torch.float64) + 0.5}


@check(KL, "k1, k2, k3 and ratio·δ match (δ = log π − log π_ref)", points=2)
def kl_values(ctx) -> None:
    def judge(run):
        delta = run.inputs["new_logprobs"] - run.inputs["ref_logprobs"]
        ratio = run.inputs["ratio"]
        mistakes = {"k1": [Mistake("δ with the sign reversed (log π_ref − log π)", "δ = log π − log π_ref",
                                lambda: -delta)],
                    "k2": [Mistake("k2 without the 1/2", "k2 = δ²/2", lambda: delta ** 2)],
                    "k3": [Mistake("k3 with the sign of δ reversed (exp(δ) − 1 − δ)",
                                "k3 = exp(−δ) − 1 + δ with δ = log π − log π_ref", lambda: delta.exp() - 1 - delta),
                        Mistake("exp(δ) − 1 + δ", "k3 = exp(−δ) − 1 + δ", lambda: delta.exp() - 1 + delta)],
                    "ratio_k1": [Mistake("δ / ratio instead of ratio·δ", "ratio_k1 is ratio·δ",
                                         lambda: delta / ratio),
                                 Mistake("k1 without the ratio", "ratio_k1 is ratio·δ", lambda: delta)]}
        for index, k in enumerate(KL_ESTIMATORS):
            got = ctx.call(KL, {**run.inputs, "estimator": k})["output"]
            compare(got, run.expected["values"][index], f"estimator {k!r}", mistakes[k])
    judge_cases(ctx, f"{KL}/batch", judge)


@check(KL, "gradient flows through new_logprobs", points=1)
def kl_gradient(ctx) -> None:
    run = ctx.fresh_case(f"{KL}/batch")
    inputs = run.inputs
    response = ctx.call(KL, {**inputs, "estimator": "k3"}, grad_wrt=["new_logprobs"],
                        backward={"path": "", "cotangent": torch.ones(3, 5, dtype=torch.float64)})
    grad = response.get("grads", {}).get("new_logprobs")
    if grad is None:
        raise Fail("k3 has no gradient with respect to new_logprobs (detached or computed under no_grad?)")
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
            Mistake("the ratio inverted (exp(sampler − old))", "w = exp(old_log_probs − sampler_log_probs)",
                    lambda: (-log_w).exp().clamp(max=1.5) * mask),
            Mistake("clamped from below instead of above", "w = min(exp(δ), cap)",
                    lambda: log_w.exp().clamp(min=1.5) * mask),
            Mistake("the mask ignored", "set masked-out positions to 0", lambda: log_w.exp().clamp(max=1.5))])
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
