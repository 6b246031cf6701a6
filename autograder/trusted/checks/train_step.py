"""Checks for stage 7: `grpo_train_step` (its contract: the docstring of `course.train_step`).

Every update is measured exactly: a float64 tiny OLMo2, plain SGD with lr = 1, so the parameter
change is minus the (clipped) gradient. Wrong normalizations are diagnosed from per-row gradients:
with g_i the gradient of row i's masked loss sum, every normalization, right or wrong, is a
weighted sum Σ w_i g_i, so the judge can compute what each known mistake would have produced.
"""

from __future__ import annotations

import math

import torch

from autograder.protocol.markers import TOKENIZER, build_tokenizer, model_marker, resolve, reward_fn
from autograder.trusted.checks.common import reference_function, rng
from autograder.trusted.core import (
    METADATA,
    UPDATE,
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
from course.aggregation import LOSS_NORMALIZATIONS

FN = "grpo_train_step"
MODEL = model_marker(0, "float64")
GROUP = 2
MODES = ("sequence", "token", "constant", "grpo")
CONSTANT = 40.0
EPS = 0.2
FULL_BATCH = "full-batch update matches the reference (sequence, token, constant, grpo-clip)"
CLIP = 4  # the clipping check sets max_grad_norm to 1/CLIP of the sequence-mode gradient norm


def _rollouts(seed: int) -> dict:
    """4 groups of 2 ragged responses; the third group's rewards are equal (zero advantage)."""
    r = rng(seed + 500)
    prompts, responses, truths = [], [], []
    for group in range(4):
        a, b = r.randint(0, 49), r.randint(0, 49)
        truth = str(a + b)
        for member in range(GROUP):
            filler = "".join(r.choice("0123456789 +") for _ in range(r.randint(0, 8)))
            right = (member == 0) != (group == 1)
            answer = truth if right and group != 2 else str(a + b + 1 + member)
            responses.append(f"<think>{filler}</think><answer>{answer}</answer>" if group != 3
                             or member
                             else filler + answer)
            prompts.append(f"{a}+{b}=")
            truths.append(truth)
    rollouts = {"repeated_prompts": prompts, "rollout_responses": responses,
                "repeated_ground_truths": truths, "group_size": GROUP}
    # the grpo-clip mode's old log-probs: near the uniform policy, so some ratios leave [1−ε, 1+ε]
    labels = _tokenized(rollouts)["labels"]
    g = torch.Generator().manual_seed(seed + 7919)
    old = -math.log(len(build_tokenizer())) + 0.15 * torch.randn(labels.shape, generator=g,
                                                                 dtype=torch.float64)
    return {**rollouts, "old_log_probs": old}


def _tokenized(inputs: dict) -> dict:
    return reference_function("tokenize_prompt_and_output")(inputs["repeated_prompts"],
                                                            inputs["rollout_responses"],
                                                    build_tokenizer())


def mode_kwargs(inputs: dict, mode: str, steps: int = 1, max_grad_norm=None) -> dict:
    kwargs = {**inputs, "gradient_accumulation_steps": steps, "max_grad_norm": max_grad_norm}
    old = kwargs.pop("old_log_probs")
    if mode == "grpo":
        kwargs.update(loss_normalization="token", pg_method="grpo",
                      old_log_probs=old, cliprange=EPS)
    else:
        kwargs["loss_normalization"] = mode
        if mode == "constant":
            kwargs["normalization_constant"] = CONSTANT
    return kwargs


def reference_step(kwargs: dict) -> dict:
    """The reference's update on a fresh model (SGD, lr = 1), in this trusted process."""
    model = resolve(MODEL)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loss, metadata = reference_function(FN)(model=model, optimizer=optimizer,
                                            tokenizer=resolve(TOKENIZER),
                                   reward_fn=reward_fn, **resolve(kwargs))
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    plain = {k: float(v) for k, v in metadata.items() if isinstance(v, (int, float, torch.Tensor))}
    return {"delta": after - before, "loss": float(loss), "metadata": plain}


def _expected_steps(inputs: dict) -> dict:
    """The reference's update in every mode, and the sequence-mode update clipped to 1/CLIP."""
    expected = {mode: reference_step(mode_kwargs(inputs, mode)) for mode in MODES}
    max_grad_norm = float(expected["sequence"]["delta"].norm()) / CLIP  # lr = 1: |Δ| = |gradient|
    expected["clipped"] = {**reference_step(mode_kwargs(inputs, "sequence", 2, max_grad_norm)),
                           "max_grad_norm": max_grad_norm}
    expected["response_mask"] = _tokenized(inputs)["response_mask"]  # where a step's tokens are
    return expected


def _row_diagnostics(inputs: dict) -> dict:
    """The per-row gradients (float32: 1e-7 relative, far inside UPDATE) of the modes without
    importance weights, for the normalization mistakes of a stored-only grading."""
    gradients, tokens, advantages = row_gradients(mode_kwargs(inputs, "sequence"))
    return {"gradients": gradients.float(), "tokens": tokens, "advantages": advantages}


@case(f"{FN}/rollouts", expected=_expected_steps, diagnostics=_row_diagnostics)
def make_rollouts(seed: int) -> dict:
    return _rollouts(seed)


# ---- diagnosing from per-row gradients ---------------------------------------------------------
def row_gradients(kwargs: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, P) gradients of each row's masked loss sum, (B,) token counts, (B,) advantages."""
    model = resolve(MODEL)
    rewards, _ = reference_function("compute_rollout_rewards")(reward_fn,
                                                               kwargs["rollout_responses"],
                                                      kwargs["repeated_ground_truths"])
    advantages, _ = reference_function("compute_group_normalized_rewards")(rewards,
                                                                           kwargs["group_size"])
    batch = _tokenized(kwargs)
    rows = []
    for i in range(len(advantages)):
        model.zero_grad(set_to_none=False)
        scored = reference_function("get_response_log_probs")(model, batch["input_ids"][i:i + 1],
                                                              batch["labels"][i:i + 1])
        old = kwargs.get("old_log_probs")
        loss, _ = reference_function("compute_policy_gradient_loss")(
            advantages[i:i + 1], scored["log_probs"], kwargs.get("pg_method", "none"),
            old[i:i + 1] if old is not None else None, kwargs.get("cliprange"),
            batch["response_mask"][i:i + 1])
        (loss * batch["response_mask"][i:i + 1]).sum().backward()
        rows.append(torch.cat([(p.grad if p.grad is not None
                                else torch.zeros_like(p)).reshape(-1).clone()
                               for p in model.parameters()]))
    return torch.stack(rows), batch["response_mask"].sum(1).double(), advantages.double()


def _split(batch: int, steps: int) -> list:
    size = -(-batch // steps)
    return [list(range(s, min(s + size, batch))) for s in range(0, batch, size)]


def normalization_mistakes(kwargs: dict, steps: int, mode: str, expected: torch.Tensor,
                           stored: dict | None = None) -> list:
    """The updates the known normalization mistakes give with `steps` micro-batches (`expected`:
    the right update; `stored`: a stored case's per-row gradients, for modes without importance
    weights)."""
    cache = {}

    def rows():
        if not cache:
            if stored is not None and kwargs.get("pg_method", "none") == "none":
                cache.update(g=stored["gradients"].double(), n=stored["tokens"],
                             a=stored["advantages"])
            else:
                cache["g"], cache["n"], cache["a"] = row_gradients(kwargs)
        return cache["g"], cache["n"], cache["a"]

    def local_token(divide_by_steps: bool):
        g, n, _ = rows()
        total = sum(g[m].sum(0) / n[m].sum().clamp_min(1) for m in _split(len(n), steps))
        return -total / (steps if divide_by_steps else 1)

    def active_only():
        g, n, a = rows()
        active = a != 0
        if mode == "sequence":
            return -(g / n.clamp_min(1)[:, None]).sum(0) / int(active.sum())
        return -g.sum(0) / n[active].sum()

    mistakes = [
        Mistake("per-micro-batch token normalization, the legacy per-micro-batch token mean (each "
                "micro-batch divided by its own token count, then by the number of accumulation "
                "steps; "
                "verl's legacy dp_actor, #7321)",
                "divide every micro-batch's masked loss sum by N, the response-token count of the "
                "whole "
                "optimizer step, counted before the loop", lambda: local_token(True)),
        Mistake("per-micro-batch token normalization without the division by accumulation steps",
                "divide every micro-batch's masked loss sum by N, the token count of the whole "
                "step",
                lambda: local_token(False)),
        Mistake("dividing by the number of accumulation steps twice (ms-swift #10117)",
                "the step-level normalization already accounts for the micro-batches: do not also "
                "divide "
                "by gradient_accumulation_steps", lambda: expected / steps),
        Mistake("a normalization that counts only rows with non-zero advantage",
                "count every row (and every token) of the step, also the zero-advantage ones you "
                "skip",
                active_only),
    ]
    if mode == "sequence":
        mistakes.append(Mistake("token normalization instead of sequence normalization",
                                "average each sequence over its tokens, then over the B sequences",
                                lambda: -rows()[0].sum(0) / rows()[1].sum()))
    return mistakes if steps > 1 else mistakes[3:]


def _delta(run: dict, what: str) -> torch.Tensor:
    if run.get("status") != "ok":
        from autograder.trusted.core import describe_error
        raise Fail(f"{what}: {describe_error(FN, run)}")
    return tensor(run.get("delta"), "the parameter update")


def _compare_update(got: torch.Tensor, expected: torch.Tensor, what: str, mistakes) -> None:
    scale = float(expected.abs().max())
    if float(got.abs().max()) == 0 and scale > 0:
        raise Fail(f"{what}: the parameters did not change (was optimizer.step() called, after "
                   "backward?)")
    # Olmo2's RMSNorm computes in float32 even in a float64 model: updates agree to ~1e-7, not 1e-15
    compare(got, expected, what, mistakes, UPDATE, scale=scale)


@check(FN, FULL_BATCH, points=3)
def full_batch(ctx) -> None:
    def judge(run):
        runs = ctx.train_steps([mode_kwargs(run.inputs, mode) for mode in MODES], MODEL)
        for mode, result in zip(MODES, runs):
            kwargs = mode_kwargs(run.inputs, mode)
            _compare_update(_delta(result, f"{mode} mode"), run.expected[mode]["delta"],
                            f"the {mode}-mode update",
                            normalization_mistakes(kwargs, 1, mode, run.expected[mode]["delta"],
                                                   run.diagnostics))
    judge_cases(ctx, f"{FN}/rollouts", judge)


@check(FN, "update independent of micro-batching", points=3)
def micro_batching(ctx) -> None:
    """The regression for the gradient-accumulation normalization bug: each micro-batch divided by
    its own token count and then by the number of steps, so the update changes with
    gradient_accumulation_steps."""
    plan = [(mode, steps) for mode in LOSS_NORMALIZATIONS for steps in (1, 2, 4, 8)]

    def judge(run):
        runs = ctx.train_steps([mode_kwargs(run.inputs, mode, steps) for mode, steps in plan],
                               MODEL)
        for (mode, steps), result in zip(plan, runs):
            what = f"{mode} mode, gradient_accumulation_steps={steps}"
            _compare_update(_delta(result, what), run.expected[mode]["delta"],
                            f"the update with {what} (ragged response lengths)",
                            normalization_mistakes(mode_kwargs(run.inputs, mode), steps, mode,
                                                   run.expected[mode]["delta"], run.diagnostics))
    judge_cases(ctx, f"{FN}/rollouts", judge, stored=1)


RANKS = 2  # the data-parallel check's world size


@check(FN, f"data-parallel update ({RANKS} gloo ranks, DDP) equals the single-process update",
       points=2, needs_processes=RANKS)
def data_parallel(ctx) -> None:
    judge_cases(ctx, f"{FN}/rollouts", lambda run: _judge_data_parallel(ctx, run), stored=1)


def _shards(inputs: dict, mode: str, max_grad_norm=None) -> list:
    """The step's rows split into RANKS equal shards, two micro-batches each."""
    full = mode_kwargs(inputs, mode, 2, max_grad_norm)
    half = len(full["rollout_responses"]) // RANKS
    return [{**full, **{key: full[key][rank * half:(rank + 1) * half]
                        for key in ("repeated_prompts", "rollout_responses",
                                    "repeated_ground_truths")}}
            for rank in range(RANKS)]


def _judge_data_parallel(ctx, run) -> None:
    for mode in ("token", "sequence"):
        results = ctx.train_steps(_shards(run.inputs, mode), MODEL, ddp=True,
                                  timeout=ctx.grader.probe_timeout)
        expected = run.expected[mode]["delta"]
        # DDP averages the ranks' gradients: a loss without the factor RANKS gives 1/RANKS of the
        # update
        mistakes = [Mistake("the world-size factor dropped (dp_size, Arctic-Platform #119): the "
                            "loss not "
                            "multiplied by the world size, so DDP's mean over ranks leaves 1/world "
                            "size of the "
                            "update", "multiply each rank's loss, divided by the step's counts "
                                      "summed over "
                            "ranks, by the world size, since DDP averages gradients",
                            lambda expected=expected: expected / RANKS)]
        if mode == "token":
            mistakes.append(Mistake(
                "token counts not summed over ranks", "all-reduce (SUM) the response-token count "
                                                      "before "
                "normalizing", lambda: _per_rank_token_update(run.inputs)))
        # verl's seq-mean denominator B·dp_size where B/dp_size was meant: 1/RANKS² of the update
        else:
            mistakes.append(Mistake(
                "the data-parallel compensation in the wrong direction: the sequence-mean loss "
                "divided by "
                "the world size where it should be multiplied, so the update is world size² too "
                "small "
                "(verl #5798)", "divide by B, the sequences summed over ranks, then multiply by "
                                "the world "
                "size", lambda expected=expected: expected / RANKS ** 2))
        for rank, result in enumerate(results):
            _compare_update(_delta(result, f"{mode} mode on rank {rank}"), expected,
                            f"the {mode}-mode update on rank {rank} of {RANKS}", mistakes)
    _judge_clipped_data_parallel(ctx, run)


def _judge_clipped_data_parallel(ctx, run) -> None:
    """DDP under global-norm clipping, at the clipping check's bound, 1/CLIP of the gradient norm:
    below 1/RANKS of it too (CLIP > RANKS), so a gradient without the world-size factor is clipped
    to the same update and clipping hides the dropped dp_size there (Arctic-Platform #119); the norm
    before clipping does not."""
    clipped = run.expected["clipped"]
    unclipped = run.expected["sequence"]["delta"]  # lr = 1: minus the step's gradient
    results = ctx.train_steps(_shards(run.inputs, "sequence", clipped["max_grad_norm"]), MODEL,
                              ddp=True,
                              timeout=ctx.grader.probe_timeout)
    norm = clipped["metadata"]["gradient_norm"]
    for rank, result in enumerate(results):
        got = _delta(result, f"sequence mode with max_grad_norm on rank {rank}")
        _compare_update(got, clipped["delta"], f"the clipped sequence-mode update on rank {rank} "
                                               f"of {RANKS}", [
            Mistake("the world size put back on the gradients after clipping: the loss without it, "
                    "clip_grad_norm_ bounded 1/world size of the step's gradient, so the clipped "
                    "update is "
                    "world size times too large (the dp_size dropped under global-norm clipping, "
                    "Arctic-Platform #119)", "multiply the loss by the world size before backward, "
                                             "so "
                    "clip_grad_norm_ sees the step's gradient",
                    lambda: RANKS * _clip(unclipped / RANKS, clipped["max_grad_norm"]))])
        compare_scalar(field(item(result.get("output"), 1, 2, "the result"), "gradient_norm",
                             "the metadata"),
                       norm, f"metadata['gradient_norm'] on rank {rank} (before clipping)", [
                           Mistake("a gradient norm of 1/world size of the step's: the dp_size "
                                   "dropped from "
                                   "the loss, which clipping hid in the update (Arctic-Platform "
                                   "#119)",
                                   "multiply the loss by the world size before backward and report "
                                   "the norm "
                                   "clip_grad_norm_ returns", lambda: torch.tensor(norm / RANKS))],
                       tolerance=METADATA)


def _clip(update: torch.Tensor, max_grad_norm: float) -> torch.Tensor:
    """`update` scaled as clip_grad_norm_ scales a gradient: by max_norm / (norm + 1e-6), at most 1
    (torch.nn.utils.clip_grad_norm_)."""
    return update * min(1.0, max_grad_norm / (float(update.norm()) + 1e-6))


def _per_rank_token_update(inputs: dict) -> torch.Tensor:
    """Each shard's token sum over its own token count, times the world size, averaged by DDP."""
    g, n, _ = row_gradients(mode_kwargs(inputs, "token"))
    return -sum(g[rows].sum(0) / n[rows].sum() for rows in _split(len(n), RANKS))


@check(FN, "metadata: loss, gradient_norm, reward means, response_token_count", points=1)
def metadata(ctx) -> None:
    def judge(run):
        result = ctx.train_steps([mode_kwargs(run.inputs, "token")], MODEL)[0]
        _delta(result, "token mode")
        expected = run.expected["token"]
        output = result.get("output")
        meta = item(output, 1, 2, f"the result of {FN}")
        compare_scalar(item(output, 0, 2, "the result"), expected["loss"], "the returned loss",
                       tolerance=METADATA)
        for key in ("loss", "gradient_norm", "reward_mean", "format_reward_mean",
                    "answer_reward_mean",
                    "advantage_mean", "response_token_count"):
            compare_scalar(field(meta, key, "the metadata"), expected["metadata"][key],
                           f"metadata[{key!r}]",
                           tolerance=METADATA)
    judge_cases(ctx, f"{FN}/rollouts", judge, stored=1)


@check(FN, "clips the global gradient norm to max_grad_norm", points=1)
def clipping(ctx) -> None:
    def judge(run):
        expected = run.expected["clipped"]
        norm = float(run.expected["sequence"]["delta"].norm())  # lr = 1: the gradient norm
        kwargs = mode_kwargs(run.inputs, "sequence", 2, max_grad_norm=expected["max_grad_norm"])
        result = ctx.train_steps([kwargs], MODEL)[0]
        _compare_update(_delta(result, "with max_grad_norm"), expected["delta"], "the clipped "
                                                                                 "update", [
            Mistake("clipping not applied",
                    "call torch.nn.utils.clip_grad_norm_(model.parameters(), "
                    "max_grad_norm) after the last backward and before optimizer.step()",
                    lambda: run.expected["sequence"]["delta"])])
        meta = item(result.get("output"), 1, 2, "the result")
        compare_scalar(field(meta, "gradient_norm", "the metadata"),
                       expected["metadata"]["gradient_norm"],
                       "metadata['gradient_norm'] (before clipping)",
                       [Mistake("the norm after clipping", "report the norm clip_grad_norm_ "
                                                           "returns (before "
                                "clipping)", lambda: torch.tensor(norm / CLIP,
                                                                  dtype=torch.float64))],
                       tolerance=METADATA)
    judge_cases(ctx, f"{FN}/rollouts", judge, stored=1)


@check(FN, "a non-finite loss raises RuntimeError before the optimizer step", points=1,
       paid_with=FULL_BATCH)
def non_finite(ctx) -> None:
    stored = ctx.cases(f"{FN}/rollouts")[0]
    kwargs = mode_kwargs(stored.inputs, "grpo")
    mask = stored.expected["response_mask"]
    old = kwargs["old_log_probs"].clone()
    # ratio exp(1e4) = inf on a response token of a graded row
    old[0, int(mask[0].nonzero()[0])] = -1e4
    kwargs.update(old_log_probs=old, pg_method="noclip", cliprange=None)
    result = ctx.train_steps([kwargs], MODEL)[0]
    if result.get("status") == "ok":
        raise Fail("an infinite importance ratio gave no error: check the loss (or the gradient "
                   "norm) is "
                   "finite and raise RuntimeError before optimizer.step()")
    if not result.get("is_runtime_error"):
        raise Fail(f"a non-finite loss should raise RuntimeError, got {result.get('error_type')}: "
                   f"{result.get('message')}")
    delta = result.get("delta")
    if type(delta) is torch.Tensor and bool((delta != 0).any()):
        raise Fail("RuntimeError was raised, but only after the parameters changed: check before "
                   "optimizer.step()")


@check(FN, "leaves no gradients behind after the step", points=1, paid_with=FULL_BATCH)
def zeroed(ctx) -> None:
    stored = ctx.cases(f"{FN}/rollouts")[0]
    result = ctx.train_steps([mode_kwargs(stored.inputs, "sequence", 2)], MODEL)[0]
    _delta(result, "sequence mode")
    if result.get("grads_left"):
        raise Fail("parameters still hold gradients after the step: call optimizer.zero_grad() "
                   "after "
                   "optimizer.step(), or the next step accumulates onto them")
