"""Checks for stage 6: `aggregate_loss_across_microbatch` (its contract: the
docstring of `course.aggregation`)."""

from __future__ import annotations

import math

import torch

from autograder.trusted.checks.common import generator, ragged_mask, run_reference
from autograder.trusted.core import (
    Fail,
    Mistake,
    case,
    check,
    compare_scalar,
    judge_cases,
    scalar,
    scalar_matches,
)

FN = "aggregate_loss_across_microbatch"
# the diagnosis of a nan that no masked value caused: 0/0 from the row without response tokens
EMPTY_ROW = ("the sequence with no response tokens divides 0 by its count of 0 (0/0 = nan); fix: "
             "count it as a loss of 0 that still counts in B: divide by the count clamped to 1, "
             "mask.sum(1).clamp_min(1)")
# the token count of a whole (imaginary) optimizer step this micro-batch belongs to
STEP_TOKENS = 37


@case(f"{FN}/batch", expected=lambda inputs: torch.stack([
    run_reference(FN, {**inputs, "loss_normalization": "sequence"}),
    run_reference(FN, {**inputs, "loss_normalization": "token",
                       "normalization_constant": STEP_TOKENS}),
    run_reference(FN, {**inputs, "loss_normalization": "constant", "normalization_constant": 24.0}),
]).detach())
def make_batch(seed: int) -> dict:
    g = generator(seed + 400)
    loss = torch.randn(5, 6, generator=g, dtype=torch.float64)
    return {"per_token_policy_gradient_loss": loss, "mask": ragged_mask(5, 6, g, empty_row=True)}


def _pieces(inputs):
    loss, mask = inputs["per_token_policy_gradient_loss"], inputs["mask"].double()
    return loss, mask, (loss * mask).sum(1), mask.sum(1)


def _magnitude(inputs) -> float:
    """The largest response-token loss: a float32 sum's rounding is relative to its terms."""
    loss, mask, _, _ = _pieces(inputs)
    return float((loss * mask).abs().max())


def _call(ctx, inputs, mode, constant=None):
    kwargs = {**inputs, "loss_normalization": mode}
    if constant is not None:
        kwargs["normalization_constant"] = constant
    return ctx.call(FN, kwargs)["output"]


@check(FN, "sequence: mean over all B sequences of each sequence's masked mean", points=2)
def sequence_mode(ctx) -> None:
    def judge(run):
        loss, mask, sums, lengths = _pieces(run.inputs)
        non_empty = lengths > 0
        got = _call(ctx, run.inputs, "sequence")
        if not math.isfinite(scalar(got, "the sequence-normalized loss")):
            raise Fail(f"the sequence-normalized loss is {scalar(got, 'it')} with finite losses: "
                       f"{EMPTY_ROW}")
        compare_scalar(got, float(run.expected[0]), "sequence-normalized loss", [
            Mistake("the empty sequence left out of B", "a sequence with no response tokens counts "
                                                        "as 0 and "
                    "still counts in B: divide by B",
                    lambda: (sums[non_empty] / lengths[non_empty]).mean()),
            Mistake("one mean over all response tokens (token normalization)",
                    "average each sequence over its own tokens, then average the B sequences",
                    lambda: sums.sum() / mask.sum()),
            Mistake("each sequence averaged over all T positions (padding included)",
                    "divide each sequence's masked sum by its own number of response tokens",
                    lambda: (sums / loss.shape[1]).mean()),
            Mistake("the per-sequence means summed instead of averaged", "divide by B",
                    lambda: (sums / lengths.clamp_min(1)).sum())], magnitude=_magnitude(run.inputs))
    judge_cases(ctx, f"{FN}/batch", judge)


@check(FN, "token: masked sum / the step's token count (not this micro-batch's)", points=1)
def token_mode(ctx) -> None:
    def judge(run):
        loss, mask, sums, lengths = _pieces(run.inputs)
        compare_scalar(_call(ctx, run.inputs, "token", STEP_TOKENS), float(run.expected[1]),
                       "token-normalized loss", [
            Mistake("per-micro-batch token normalization (dividing by this micro-batch's own token "
                    "count)",
                    "divide by normalization_constant, the token count of the whole optimizer step",
                    lambda: sums.sum() / mask.sum()),
            Mistake("an unmasked sum", "select the response tokens before summing: "
                    "torch.where(mask.bool(), loss, 0).sum()", lambda: loss.sum() / STEP_TOKENS)],
            magnitude=_magnitude(run.inputs))
    judge_cases(ctx, f"{FN}/batch", judge)


@check(FN, "constant: masked sum / normalization_constant (Dr. GRPO)", points=1)
def constant_mode(ctx) -> None:
    def judge(run):
        loss, mask, sums, lengths = _pieces(run.inputs)
        compare_scalar(_call(ctx, run.inputs, "constant", 24.0), float(run.expected[2]),
                       "constant-normalized loss", [
            Mistake("a masked mean instead of the masked sum over the constant", "divide the "
                                                                                 "masked sum by "
                                                                                 "the constant",
                    lambda: sums.sum() / mask.sum()),
            Mistake("an unmasked sum", "select the response tokens before summing: "
                    "torch.where(mask.bool(), loss, 0).sum()", lambda: loss.sum() / 24.0)],
            magnitude=_magnitude(run.inputs))
    judge_cases(ctx, f"{FN}/batch", judge)


@check(FN, "masked positions never leak, even when they hold inf or nan", points=1)
def padding_does_not_leak(ctx) -> None:
    """`loss * mask` leaks: 0 · nan = nan and 0 · inf = nan. Select with the mask instead."""
    def judge(run):
        loss, mask = run.inputs["per_token_policy_gradient_loss"].clone(), run.inputs["mask"]
        off = (mask == 0).nonzero()
        for number, (row, column) in enumerate(off.tolist()):
            loss[row, column] = (float("nan"), float("inf"), -float("inf"))[number % 3]
        inputs = {**run.inputs, "per_token_policy_gradient_loss": loss}
        for mode, constant, index in (("sequence", None, 0), ("token", STEP_TOKENS, 1), ("constant",
                                                                                         24.0, 2)):
            got = scalar(_call(ctx, inputs, mode, constant), f"the {mode}-normalized loss")
            clean = scalar(_call(ctx, run.inputs, mode, constant), f"the {mode}-normalized loss")
            if not math.isfinite(clean):  # the nan is there without any nan/inf to leak
                raise Fail(f"the {mode}-normalized loss is {clean} already with finite losses at "
                           "every position, so nothing leaks: "
                           + (EMPTY_ROW if mode == "sequence" else f"see the '{mode}:' check"))
            if math.isfinite(got) and not scalar_matches(clean, float(run.expected[index]),
                                                         magnitude=_magnitude(run.inputs)):
                raise Fail(f"the {mode}-normalized loss is wrong already without inf/nan at masked "
                           f"positions (see the '{mode}:' check): nothing leaks, fix that one "
                           "first")
            if not math.isfinite(got):
                raise Fail(f"with nan/inf at masked-out positions the {mode}-normalized loss is "
                           f"{got}: "
                           "0·nan and 0·inf are nan, so multiplying by the mask leaks them; fix: "
                           "select "
                           "with torch.where(mask.bool(), loss, 0) before summing")
            compare_scalar(got, float(run.expected[index]), f"the {mode}-normalized loss with "
                                                            "nan/inf "
                           "at masked-out positions", magnitude=_magnitude(run.inputs))
    judge_cases(ctx, f"{FN}/batch", judge)


@check(FN, "non-positive or missing constants raise ValueError", points=1,
       paid_with="constant: masked sum / normalization_constant (Dr. GRPO)")
def bad_constant(ctx) -> None:
    inputs = make_batch(0)
    for mode, constant in (("constant", 0), ("constant", -3.0), ("constant", None), ("token", 0)):
        kwargs = {**inputs, "loss_normalization": mode}
        if constant is not None:
            kwargs["normalization_constant"] = constant
        response = ctx.outcome(FN, kwargs)
        if response.get("status") == "ok" or not response.get("is_value_error"):
            raise Fail(f"loss_normalization={mode!r} with normalization_constant={constant!r} "
                       "should raise "
                       "ValueError, got " + ("a result" if response.get("status") == "ok"
                                             else str(response.get("error_type"))))
