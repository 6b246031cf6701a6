"""Notebook 09's reward exercise: ask a reward what it pays for, then train on it.

A policy optimizes the reward it is given, not the one meant. Run D of the failure lab
(`failure_runs.loophole_reward_fn`) also pays for any answer longer than the right one, and by step
41 its responses have grown from 7.8 to 12 tokens while its reward climbs and the held-out accuracy
does not. `reward_holes` asks a reward function about responses a policy can learn to write, each
of one kind: the right answer in the format, a wrong answer in the format, or a response out of
the format (r1-zero's format; Guo et al. 2025, arXiv 2501.12948). A sound reward keeps the order
right > wrong in the format >= out of the format, and pays every wrong answer alike: r1-zero's
(1, 0, 0) does, and so does a shaped one that adds 0.1 for the format. `reward_holes` lists where
a reward breaks that order. `train_with_reward` reruns the lab's healthy configuration with the
reward swapped, so r1-zero's reward gives back the healthy run step for step (seed 0), and a
hackable one Run D's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from course.lab.failure_runs import HEALTHY, KEPT, rounded, trained_records
from course.loop.tasks import AdditionTask, make_problems, r1_zero_reward_fn

RewardFn = Callable[[str, str], dict[str, float]]
RIGHT, WRONG, MALFORMED = "right", "wrong", "malformed"
# (what the response is, the response for answer {a} and a wrong answer {w}, its kind: RIGHT (the
# right answer in the format), WRONG (in the format, not the right answer) or MALFORMED (out of it))
PROBES = (
    ("the right answer", "</think> <answer>{a}</answer>", RIGHT),
    ("the right answer, then <eos>", "</think> <answer>{a}</answer><eos>", RIGHT),
    ("a wrong answer", "</think> <answer>{w}</answer>", WRONG),
    ("the right answer with one more digit (Run D's loophole)", "</think> <answer>{a}0</answer>", WRONG),
    ("the right answer twice", "</think> <answer>{a}{a}</answer>", WRONG),
    ("the right answer without the tags", "{a}", MALFORMED),
    ("an empty answer", "</think> <answer></answer>", WRONG),
    ("the right answer, then more text", "</think> <answer>{a}</answer> or {w}", MALFORMED),
)
# the recorded runs' length, so the held-out evaluations (steps 25 and 50) line up; Run D's reward is
# hacked by step 41 of its recording
REWARD_STEPS = 50


def _wrong(answer: str) -> str:
    """`answer` with its last digit changed: the same length, not the sum."""
    return answer[:-1] + str((int(answer[-1]) + 1) % 10)


def _order_breaks(paid: dict[str, float]) -> dict[str, str]:
    """{probe: why} for the probes of one problem (`paid`: probe -> reward) that break the order:
    a probe not RIGHT paid as much as the least-paid right answer; a WRONG one paid more than the
    plain wrong answer (padding or repeating pays); a MALFORMED one paid more than the least-paid
    WRONG one (leaving the format pays)."""
    kinds = {what: kind for what, _, kind in PROBES}
    right = min(v for what, v in paid.items() if kinds[what] == RIGHT)
    plain = paid["a wrong answer"]
    least_wrong = min(v for what, v in paid.items() if kinds[what] == WRONG)
    breaks = {}
    for what, value in paid.items():
        if not math.isfinite(value):
            breaks[what] = "not a finite number"
        elif kinds[what] != RIGHT and value >= right:
            breaks[what] = f"as much as the right answer ({right:g}) or more"
        elif kinds[what] == WRONG and value > plain:
            breaks[what] = f"more than a plain wrong answer ({plain:g})"
        elif kinds[what] == MALFORMED and value > least_wrong:
            breaks[what] = f"more than a wrong answer in the format ({least_wrong:g})"
    return breaks


def reward_holes(reward_fn: RewardFn, problems: int = 3) -> list[str]:
    """Where `reward_fn` breaks a sound reward's order on `PROBES` (for `problems` held-out
    problems): one line per probe, [] for none. A reward that raises, or returns no number under
    "reward", is a hole too."""
    holes: dict[str, str] = {}
    for problem in make_problems(problems, seed=0, split="test"):
        paid, responses = {}, {}
        for what, template, _ in PROBES:
            responses[what] = template.format(a=problem.answer, w=_wrong(problem.answer))
            try:
                paid[what] = float(reward_fn(responses[what], problem.answer)["reward"])
            except Exception as error:  # noqa: BLE001 - the learner's code: report, never crash
                holes.setdefault(what, f"{what}: raises {type(error).__name__}: {error}")
        if len(paid) < len(PROBES):
            continue  # an order needs every probe's number
        for what, why in _order_breaks(paid).items():
            holes.setdefault(what, f"{what}: pays {paid[what]:g}, {why} ({responses[what]!r})")
    return [holes[what] for what, _, _ in PROBES if what in holes]


class RewardedAddition(AdditionTask):
    """The addition task trained on `reward_fn`'s `reward`; its format and answer scores stay
    r1-zero's, so the held-out accuracy is the strict one whatever the reward."""

    def __init__(self, reward_fn: RewardFn):
        self.name = "addition, rewarded by your reward_fn"
        self.reward_fn = lambda response, truth: {**r1_zero_reward_fn(response, truth),
                                                  "reward": float(reward_fn(response, truth)["reward"])}


def train_with_reward(reward_fn: RewardFn, steps: int = REWARD_STEPS,
                      implementations=None) -> list[dict]:
    """The failure lab's healthy run (seed 0, CPU) for `steps` steps, trained on `reward_fn` with
    `implementations`' stages (default: the reference's; the notebook passes the learner's): its
    records, as `failure_runs.load_failure_run`'s, held-out accuracy at the healthy run's steps."""
    records, _ = trained_records("healthy", replace(HEALTHY, steps=steps), task=RewardedAddition(reward_fn),
                                 implementations=implementations)
    return [{key: rounded(record[key]) for key in KEPT if key in record} for record in records]
