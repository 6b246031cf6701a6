"""Checks for stage 4: `compute_policy_gradient_loss`, its five methods and their metadata."""

from __future__ import annotations

import math

import torch

from autograder.trusted.checks.common import (
    generator,
    ragged_mask,
    reference_gradient,
    run_reference,
)
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
from course.variants import PG_METHODS

PG = "compute_policy_gradient_loss"
EPS = 0.2


def _policy(seed: int, batch: int = 4, positions: int = 7) -> dict:
    g = generator(seed)
    log_probs = -torch.rand(batch, positions, generator=g, dtype=torch.float64) * 3 - 0.05
    old = log_probs + torch.randn(batch, positions, generator=g, dtype=torch.float64) * 0.3
    advantages = torch.randn(batch, generator=g, dtype=torch.float64)
    advantages[0], advantages[1] = abs(advantages[0]) + 0.1, -abs(advantages[1]) - 0.1
    return {"raw_rewards_or_advantages": advantages, "policy_log_probs": log_probs,
            "old_log_probs": old, "response_mask": ragged_mask(batch, positions, g)}


def _pg_expected(inputs: dict) -> dict:
    out = {}
    for method in PG_METHODS:
        loss, metadata = run_reference(PG, {**inputs, "pg_method": method,
                                            "cliprange": EPS})
        out[method] = {"loss": loss.detach(), "metadata": {k: torch.as_tensor(v).double()
                                                           for k, v in metadata.items()}}
    # d(Σ mask · loss)/d log π of CISPO: the weight is detached, so -min(r, 1+ε)·A on the mask
    out["cispo"]["grad"] = reference_gradient(
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
        "noclip": [
            Mistake("the ratio inverted (π_old/π)", "r = exp(log π − log π_old)", lambda: -a / r),
            Mistake(
                "A·log π instead of A·ratio",
                "noclip weights A by r = exp(log π − log π_old)",
                lambda: expected["none"]["loss"],
            ),
        ],
        "grpo": [
            Mistake(
                "max instead of min in the clipped objective",
                "loss = −min(r·A, clip(r, 1−ε, 1+ε)·A)",
                lambda: -torch.maximum(r * a, clipped * a),
            ),
            Mistake(
                "the clipped term alone (no min with the unclipped one)",
                "take −min(r·A, clip(r)·A): clipping may only remove gradient, never add it",
                lambda: -clipped * a,
            ),
        ],
        "gspo": [
            Mistake(
                "GSPO as a product of token ratios instead of their geometric mean",
                "s = exp(mean over response tokens of log r), not exp(sum)",
                lambda: gspo(log_ratio.sum(1, keepdim=True)),
            ),
            Mistake(
                "the mean log-ratio taken over all T positions (padding included)",
                "average log r over the response tokens only (masked mean)",
                lambda: gspo(log_ratio.sum(1, keepdim=True) / T),
            ),
            Mistake(
                "token-level clipping (GRPO) instead of one sequence ratio",
                "GSPO clips one geometric-mean ratio per sequence",
                lambda: expected["grpo"]["loss"],
            ),
            Mistake(
                "the arithmetic mean of token ratios",
                "use the geometric mean: exp(masked mean of log r)",
                lambda: gspo(((r * mask).sum(1, keepdim=True) / lengths).log()),
            ),
        ],
        "cispo": [
            Mistake(
                "the PPO clipped loss instead of CISPO's weighted log π",
                "loss = −sg(min(r, 1+ε))·A·log π",
                lambda: expected["grpo"]["loss"],
            ),
            Mistake(
                "the weight clipped on both sides",
                "CISPO caps the weight only above: min(r, 1+ε)",
                lambda: -clipped * a * inputs["policy_log_probs"],
            ),
        ],
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
    mistakes = [Mistake(m.label, m.fix, lambda m=m: torch.where(mask, m.answer().double(),
                                                                expected))
                for m in _pg_mistakes(method, run.inputs, run.expected)]
    compare(loss, expected, f"{method} per-token loss (on response tokens)", mistakes)
    return response


def _pg_gradient(ctx, method: str, run, wrt: str):
    """Judge `method`'s values, then return d(Σ masked loss)/d`wrt` (None when no gradient reaches
    it)."""
    cotangent = run.inputs["response_mask"].double()
    response = _pg_judge(
        ctx, method, run, {"grad_wrt": [wrt], "backward": {"path": "0", "cotangent": cotangent}}
    )
    return response.get("grads", {}).get(wrt)


@check(PG, "none: −A·log π", points=1)
def pg_none(ctx) -> None:
    judge_cases(ctx, f"{PG}/batch", lambda run: _pg_judge(ctx, "none", run))


@check(PG, "noclip: −A·r with r = exp(log π − sg(log π_old))", points=1)
def pg_noclip(ctx) -> None:
    def judge(run):
        grad = _pg_gradient(ctx, "noclip", run, "old_log_probs")
        if grad is not None and float(grad.abs().max()) > 0:
            raise Fail("the loss has a gradient with respect to old_log_probs: this looks like log "
                       "π_old "
                       "not detached; fix: r = exp(log π − old_log_probs.detach())")
    judge_cases(ctx, f"{PG}/batch", judge)


@check(PG, "grpo: −min(r·A, clip(r, 1−ε, 1+ε)·A)", points=1)
def pg_grpo(ctx) -> None:
    judge_cases(ctx, f"{PG}/batch", lambda run: _pg_judge(ctx, "grpo", run))


@check(PG, "masked positions never leak into the gradient, even when they hold inf or nan",
       points=1)
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
        expected = reference_gradient(PG, kwargs, "policy_log_probs", 0, cotangent)
        response = ctx.call(PG, {**kwargs, "old_log_probs": poisoned},
                            grad_wrt=["policy_log_probs"],
                            backward={"path": "0", "cotangent": cotangent})
        grad = response.get("grads", {}).get("policy_log_probs")
        if grad is None:
            raise Fail(f"{method}: the loss has no gradient with respect to policy_log_probs")
        if not torch.isfinite(grad).all():
            raise Fail(f"{method}: with inf/nan in old_log_probs at masked-out positions the "
                       "gradient "
                       "holds nan: selecting the loss afterwards keeps its value finite, but "
                       "backward "
                       "through exp(nan) or exp(inf) is 0·∞ = nan; fix: select the inputs with "
                       "torch.where(mask, old_log_probs, 0) (and log π) BEFORE computing the ratio")
        compare(grad, expected, f"{method}: d(Σ masked loss)/d log π with inf/nan at masked-out "
                                "positions")


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
                "count a token where clipping removes its gradient: A>0 and r>1+ε, or A<0 and "
                "r<1−ε",
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
            compare_scalar(field(metadata, key, "grpo metadata"),
                           float(run.expected["grpo"]["metadata"][key]),
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
        attached = expected + torch.where(r < 1 + EPS, -a * r * run.inputs["policy_log_probs"],
                                          0) * cotangent
        compare(grad, expected, "the gradient of the CISPO loss with respect to log π", [
            Mistake("the CISPO weight not detached (gradient also flows through min(r, 1+ε))",
                    "detach the weight: torch.clamp(ratio, max=1+ε).detach()", lambda: attached)])
    judge_cases(ctx, f"{PG}/batch", judge)


@check(PG, "missing old_log_probs or cliprange raise ValueError", points=1,
       paid_with="grpo: −min(r·A, clip(r, 1−ε, 1+ε)·A)")
def pg_bad_input(ctx) -> None:
    inputs = _policy(3)
    for method, drop in (("grpo", "old_log_probs"), ("grpo", "cliprange"), ("noclip",
                                                                            "old_log_probs")):
        kwargs = {**inputs, "pg_method": method, "cliprange": EPS}
        kwargs.pop(drop)
        response = ctx.outcome(PG, kwargs)
        if response.get("status") == "ok" or not response.get("is_value_error"):
            raise Fail(f"{method} without {drop} should raise ValueError, got "
                       + ("a result" if response.get("status") == "ok"
                          else str(response.get("error_type"))))
