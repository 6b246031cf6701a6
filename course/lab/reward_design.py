"""Notebook 08's reward exercise: ask a reward what it pays for, then train on it.

A policy optimizes the reward it is given, not the one meant. Run D of the failure lab
(`failure_runs.loophole_reward_fn`) also pays for any answer longer than the right one, and by step
41 its responses have grown from 7.8 to 12 tokens while its reward climbs and the held-out accuracy
does not. `reward_holes` asks a reward function about responses a policy can learn to write, each
with what a sound reward for this task pays (r1-zero's: 1 for the right answer in the format,
else 0; Guo et al. 2025, arXiv 2501.12948), and lists where it pays otherwise.
`train_with_reward` reruns the lab's healthy configuration with the reward swapped, so a sound
reward gives back the healthy run step for step (seed 0), and a hackable one Run D's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from course.lab.failure_runs import HEALTHY, KEPT, rounded, trained_records
from course.loop.tasks import AdditionTask, make_problems, r1_zero_reward_fn

RewardFn = Callable[[str, str], dict[str, float]]
# (what the response is, the response for answer {a} and a wrong answer {w}, what a sound reward pays)
PROBES = (
    ("the right answer", "</think> <answer>{a}</answer>", 1.0),
    ("the right answer, then <eos>", "</think> <answer>{a}</answer><eos>", 1.0),
    ("a wrong answer", "</think> <answer>{w}</answer>", 0.0),
    ("the right answer with one more digit (Run D's loophole)", "</think> <answer>{a}0</answer>", 0.0),
    ("the right answer twice", "</think> <answer>{a}{a}</answer>", 0.0),
    ("the right answer without the tags", "{a}", 0.0),
    ("an empty answer", "</think> <answer></answer>", 0.0),
    ("the right answer, then more text", "</think> <answer>{a}</answer> or {w}", 0.0),
)
# the recorded runs' length, so the held-out evaluations (steps 25 and 50) line up; Run D's reward is
# hacked by step 41 of its recording
REWARD_STEPS = 50


def _wrong(answer: str) -> str:
    """`answer` with its last digit changed: the same length, not the sum."""
    return answer[:-1] + str((int(answer[-1]) + 1) % 10)


def reward_holes(reward_fn: RewardFn, problems: int = 3) -> list[str]:
    """Where `reward_fn` pays otherwise than a sound reward on `PROBES` (for `problems` held-out
    problems): one line per probe, [] for none. A reward that raises, or returns no number under
    "reward", is a hole too."""
    holes = []
    for what, template, sound in PROBES:
        for problem in make_problems(problems, seed=0, split="test"):
            response = template.format(a=problem.answer, w=_wrong(problem.answer))
            try:
                paid = float(reward_fn(response, problem.answer)["reward"])
            except Exception as error:  # noqa: BLE001 - the learner's code: report, never crash
                holes.append(f"{what}: raises {type(error).__name__}: {error}")
                break
            if paid != sound:
                holes.append(f"{what}: pays {paid:g}, a sound reward {sound:g} ({response!r})")
                break
    return holes


class RewardedAddition(AdditionTask):
    """The addition task trained on `reward_fn`'s `reward`; its format and answer scores stay
    r1-zero's, so the held-out accuracy is the strict one whatever the reward."""

    def __init__(self, reward_fn: RewardFn):
        self.name = "addition, rewarded by your reward_fn"
        self.reward_fn = lambda response, truth: {**r1_zero_reward_fn(response, truth),
                                                  "reward": float(reward_fn(response, truth)["reward"])}


def train_with_reward(reward_fn: RewardFn, steps: int = REWARD_STEPS) -> list[dict]:
    """The failure lab's healthy run (seed 0, CPU) for `steps` steps, trained on `reward_fn`: its
    records, as `failure_runs.load_failure_run`'s, held-out accuracy at the healthy run's steps."""
    records, _ = trained_records("healthy", replace(HEALTHY, steps=steps), task=RewardedAddition(reward_fn))
    return [{key: rounded(record[key]) for key in KEPT if key in record} for record in records]
