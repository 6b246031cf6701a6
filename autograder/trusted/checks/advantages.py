"""Checks for stage 3: `compute_rollout_rewards` and `compute_group_normalized_rewards`
(their contract: the docstrings of `course.advantages`)."""

from __future__ import annotations

import torch

from autograder.protocol.markers import REWARD_FN, reward_fn
from autograder.trusted.checks.common import generator, rng, run_reference
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

REWARDS = "compute_rollout_rewards"
ADVANTAGES = "compute_group_normalized_rewards"
META_KEYS = ("reward_mean", "format_reward_mean", "answer_reward_mean")


@case(f"{REWARDS}/responses", expected=lambda inputs: run_reference(REWARDS, inputs))
def make_responses(seed: int) -> dict:
    r = rng(seed)
    truths, responses = [], []
    for _ in range(6):
        truth = str(r.randint(0, 99))
        kind = r.randint(0, 2)
        answer = truth if kind == 0 else str(r.randint(100, 199))
        responses.append(f"<think>{r.randint(0, 9)}</think> <answer>{answer}</answer>" if kind < 2
                         else f"the answer is {truth}")
        truths.append(truth)
    return {"reward_fn": REWARD_FN, "rollout_responses": responses,
            "repeated_ground_truths": truths}


def _column(inputs: dict, key: str) -> torch.Tensor:
    return torch.tensor([reward_fn(a, b)[key] for a, b in
                         zip(inputs["rollout_responses"], inputs["repeated_ground_truths"])])


@check(REWARDS, "rewards (float32) and the three metadata means match", points=2)
def reward_values(ctx) -> None:
    def judge(run):
        output = ctx.call(REWARDS, run.inputs)["output"]
        rewards = tensor(item(output, 0, 2, f"the result of {REWARDS}"), "rewards")
        compare(rewards, run.expected[0], "rewards", [
            Mistake("the format reward instead of `reward`", "use result['reward']",
                    lambda: _column(run.inputs, "format_reward")),
            Mistake("the answer reward instead of `reward`", "use result['reward']",
                    lambda: _column(run.inputs, "answer_reward"))])
        if rewards.dtype != torch.float32:
            raise Fail(f"rewards are {rewards.dtype}, expected float32")
        for key in META_KEYS:
            compare_scalar(field(output[1], key, "the metadata"), run.expected[1][key],
                           f"metadata[{key!r}]")
    judge_cases(ctx, f"{REWARDS}/responses", judge)


@check(REWARDS, "responses and ground truths of different lengths raise ValueError", points=1,
       paid_with="rewards (float32) and the three metadata means match")
def reward_bad_input(ctx) -> None:
    response = ctx.outcome(REWARDS, {"reward_fn": REWARD_FN, "rollout_responses": ["a", "b"],
                                     "repeated_ground_truths": ["1"]})
    if response.get("status") == "ok" or not response.get("is_value_error"):
        raise Fail("2 responses with 1 ground truth should raise ValueError, got "
                   + ("a result" if response.get("status") == "ok"
                      else str(response.get("error_type"))))


def _grouped_rewards(seed: int) -> torch.Tensor:
    g = generator(seed)
    rewards = (
        torch.randint(0, 3, (4, 4), generator=g).double() * 0.5
        + torch.rand(4, 4, generator=g).double()
    )
    rewards[2] = 1.0  # one group whose rewards are all equal
    return rewards.reshape(-1)


@case(f"{ADVANTAGES}/std", expected=lambda inputs: run_reference(ADVANTAGES, inputs))
def make_std(seed: int) -> dict:
    return {"raw_rewards": _grouped_rewards(seed), "group_size": 4,
            "advantage_eps": (1e-6, 0.1)[seed % 2]}


def _std_mistakes(inputs: dict) -> list:
    rewards, size, eps = inputs["raw_rewards"], inputs["group_size"], inputs["advantage_eps"]
    grouped = rewards.reshape(-1, size)
    centered = grouped - grouped.mean(1, keepdim=True)

    def flat(x):
        return x.reshape(-1)
    strided = rewards.reshape(size, -1).t()  # groups taken as every n-th reward
    return [
        Mistake(
            "a biased std (dividing by G instead of G − 1)",
            "use the unbiased sample std: torch.std(..., unbiased=True) / correction=1",
            lambda: flat(centered / (grouped.std(1, unbiased=False, keepdim=True) + eps)),
        ),
        Mistake(
            "eps inside the square root (sqrt(var + eps))",
            "add eps outside: (r − mean) / (std + eps)",
            lambda: flat(centered / (grouped.var(1, keepdim=True) + eps).sqrt()),
        ),
        Mistake(
            "eps left out",
            "divide by (std + advantage_eps)",
            lambda: flat(torch.nan_to_num(centered / grouped.std(1, keepdim=True))),
        ),
        Mistake(
            "normalizing over the whole batch instead of per group",
            "reshape to (n_groups, G) and take mean/std over dim=1",
            lambda: (rewards - rewards.mean()) / (rewards.std() + eps),
        ),
        Mistake(
            "groups taken as interleaved (strided) rows",
            "groups are consecutive blocks: reshape(-1, group_size)",
            lambda: (
                ((strided - strided.mean(1, keepdim=True)) / (strided.std(1, keepdim=True) + eps))
                .t()
                .reshape(-1)
            ),
        ),
    ]


@check(ADVANTAGES, "std-normalized advantages match the reference", points=3)
def std_values(ctx) -> None:
    def judge(run):
        output = ctx.call(ADVANTAGES, run.inputs)["output"]
        compare(item(output, 0, 2, f"the result of {ADVANTAGES}"), run.expected[0], "advantages",
                _std_mistakes(run.inputs))
    judge_cases(ctx, f"{ADVANTAGES}/std", judge)


@case(f"{ADVANTAGES}/variants", expected=lambda inputs: {
    f"{b}/{n}": run_reference(ADVANTAGES, {**inputs, "baseline": b, "advantage_normalizer": n})[0]
    for b, n in (("none", "none"), ("mean", "none"), ("mean", "mean"), ("none", "std"))})
def make_variants(seed: int) -> dict:
    return {"raw_rewards": _grouped_rewards(seed) + 0.25, "group_size": 4, "advantage_eps": 1e-6}


@check(ADVANTAGES, "baseline='none' (RFT) and normalizer='none' (Dr. GRPO) / 'mean' (MaxRL)",
       points=2)
def variant_values(ctx) -> None:
    def judge(run):
        rewards = run.inputs["raw_rewards"].reshape(-1, 4)
        centered = rewards - rewards.mean(1, keepdim=True)
        for key, expected in run.expected.items():
            baseline, normalizer = key.split("/")
            output = ctx.call(ADVANTAGES, {**run.inputs, "baseline": baseline,
                                           "advantage_normalizer": normalizer})["output"]
            compare(
                item(output, 0, 2, "the result"),
                expected,
                f"advantages with baseline={baseline!r}, advantage_normalizer={normalizer!r}",
                [
                    Mistake(
                        "the mean subtracted although baseline='none'",
                        "baseline='none' keeps the raw rewards",
                        lambda: centered.reshape(-1),
                    ),
                    Mistake(
                        "dividing by the std although advantage_normalizer='mean'",
                        "'mean' divides by (group mean + eps)",
                        lambda: (centered / (rewards.std(1, keepdim=True) + 1e-6)).reshape(-1),
                    ),
                    Mistake(
                        "dividing by the mean of the centered rewards (≈0)",
                        "'mean' divides by the mean of the raw group rewards",
                        lambda: (centered / (centered.mean(1, keepdim=True) + 1e-6)).reshape(-1),
                    ),
                ],
            )
    judge_cases(ctx, f"{ADVANTAGES}/variants", judge)


@check(ADVANTAGES, "metadata advantage_mean and advantage_std", points=1)
def advantage_metadata(ctx) -> None:
    def judge(run):
        output = ctx.call(ADVANTAGES, run.inputs)["output"]
        metadata = item(output, 1, 2, "the result")
        advantages = run.expected[0]
        # the mean of centered values is a cancellation: rounding relative to the advantages' size
        compare_scalar(field(metadata, "advantage_mean", "the metadata"), float(advantages.mean()),
                       "metadata['advantage_mean']", magnitude=float(advantages.abs().max()))
        compare_scalar(field(metadata, "advantage_std", "the metadata"), float(advantages.std()),
                       "metadata['advantage_std']")
    judge_cases(ctx, f"{ADVANTAGES}/std", judge)


@check(ADVANTAGES, "a group of equal rewards gets finite zero advantages", points=1,
       paid_with="std-normalized advantages match the reference")
def equal_group(ctx) -> None:
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 2.0], dtype=torch.float64)
    got = tensor(item(ctx.call(ADVANTAGES, {"raw_rewards": rewards, "group_size": 3})["output"], 0,
                      2,
                      "the result"), "advantages")
    if got.dtype.is_floating_point and not bool(torch.isfinite(got).all()):
        raise Fail("equal rewards in a group gave NaN/inf advantages: std is 0 there, so the "
                   "denominator must be (std + eps), never std alone")
    compare(got, torch.tensor([0.0, 0, 0, -1 / (1 + 1e-6), 0, 1 / (1 + 1e-6)], dtype=torch.float64),
            "advantages of rewards [1, 1, 1 | 0, 1, 2] in groups of 3")
