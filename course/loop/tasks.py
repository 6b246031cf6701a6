"""Tasks: the interface a GRPO run trains on, and the synthetic addition task, its first instance.

A task (`Task`) gives problems with a `question` and a verifiable `answer`, the prompt the policy
completes, and a reward function `reward_fn(response, ground_truth) -> {"reward", "format_reward",
"answer_reward"}` (the contract of `compute_rollout_rewards`). `ADDITION` is the task below;
`course.loop.gsm8k.GSM8KTask` is grade-school math from a local JSONL file.

The synthetic task: two-number addition with a verifiable answer, and its r1-zero reward.

A problem is `a+b` with two-digit operands, 10 <= a, b <= 99; the answer is the sum written with its
digits reversed (least significant first), so that a left-to-right model produces each digit after
the digits it depends on, carries included. 37+48 = 85 is answered "58". (Measured on a 1M-parameter
model: written left to right the task barely learns; reversed, it does. Reversed output is the
usual trick for teaching arithmetic to small transformers, Lee et al. 2023, arXiv 2307.03381.
Operands of a fixed width matter too: with 0..99, so that digits move about, 500 supervised steps
left the model at chance.)

The response format is DeepSeek-R1-Zero's (Guo et al. 2025, arXiv 2501.12948): the prompt opens a
`<think>` block, and the model must close it and give its answer in `<answer>...</answer>`:

    prompt:   "User: 37+48\\nAssistant: <think>"
    response: "</think> <answer>58</answer>"

The reward follows the r1-zero reward of Stanford CS336 assignment 5 (`r1_zero_reward_fn`):
format reward 1 when the response is `... </think> <answer>X</answer>`, answer reward 1 when
additionally X is the ground truth, reward = answer reward. Train and held-out problems come from
disjoint parts of the 8,100 possible pairs (6,480 and 1,620), so held-out accuracy measures
generalization, not memorization.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

MIN_OPERAND, MAX_OPERAND = 10, 99
PROMPT_TEMPLATE = "User: {question}\nAssistant: <think>"
# Everything after </think>; one trailing <eos> (as sampled) or whitespace is allowed.
RESPONSE_PATTERN = re.compile(r"^(?P<think>.*?)</think> "
                              r"<answer>(?P<answer>.*?)</answer>\s*(<eos>)?\s*$",
                              re.DOTALL)
SPLITS = ("train", "test")
# Which pairs are held out is fixed by this seed, not by the caller's, so splits never overlap.
_SPLIT_SEED = 20250101
_HELD_OUT_FRACTION = 0.2


@dataclass(frozen=True)
class Problem:
    """One addition problem: operands, the question text and the verifiable answer."""

    a: int
    b: int

    @property
    def question(self) -> str:
        return f"{self.a}+{self.b}"

    @property
    def answer(self) -> str:
        """The sum with its digits reversed: 37+48 -> "58", 50+50 -> "001"."""
        return str(self.a + self.b)[::-1]


def _split_pairs(split: str) -> list[tuple[int, int]]:
    """All (a, b) pairs of one split, in a fixed order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    operands = range(MIN_OPERAND, MAX_OPERAND + 1)
    pairs = [(a, b) for a in operands for b in operands]
    random.Random(_SPLIT_SEED).shuffle(pairs)
    n_held_out = int(len(pairs) * _HELD_OUT_FRACTION)
    return pairs[:n_held_out] if split == "test" else pairs[n_held_out:]


def make_problems(n: int | None, seed: int, split: str = "train") -> list[Problem]:
    """`n` distinct problems drawn from `split` ("train": 6,480 pairs, "test": 1,620), seeded.

    `n=None` returns the whole split, shuffled.
    """
    pairs = _split_pairs(split)
    n = len(pairs) if n is None else n
    if not isinstance(n, int) or not 0 <= n <= len(pairs):
        raise ValueError(f"n must be an integer in [0, {len(pairs)}] for split {split!r}, got "
                         f"{n!r}")
    return [Problem(a, b) for a, b in random.Random(seed).sample(pairs, n)]


def format_prompt(problem: Problem) -> str:
    """The prompt the policy completes; it ends inside the opened <think> block."""
    return PROMPT_TEMPLATE.format(question=problem.question)


def format_response(problem: Problem) -> str:
    """The reference response the warm start is trained on (without <eos>)."""
    return f"</think> <answer>{problem.answer}</answer>"


def r1_zero_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """Score one response: dict of `reward`, `format_reward`, `answer_reward`, each 0.0 or 1.0.

    A wrong answer in the right format earns format reward only; an unparseable response earns
    nothing, even if the right digits appear in it.
    """
    match = RESPONSE_PATTERN.match(response)
    if match is None:
        return {"reward": 0.0, "format_reward": 0.0, "answer_reward": 0.0}
    correct = float(match.group("answer").strip() == ground_truth.strip())
    return {"reward": correct, "format_reward": 1.0, "answer_reward": correct}


class TaskProblem(Protocol):
    """What every task's problems have: the question text and the ground truth the reward checks."""

    @property
    def question(self) -> str: ...

    @property
    def answer(self) -> str: ...


class Task(Protocol):
    """A task GRPO trains on: problems of a split, the prompt of each, and the reward."""

    name: str
    reward_fn: Callable[[str, str], dict[str, float]]

    def problems(self, split: str) -> Sequence[TaskProblem]:
        """Every problem of `split` ("train" or "test"), in a fixed order."""
        ...

    def prompt(self, problem: TaskProblem) -> str:
        """The text the policy completes (no special tokens are added when it is tokenized)."""
        ...


class AdditionTask:
    """The synthetic addition task above, behind the `Task` interface."""

    name = "addition"
    reward_fn = staticmethod(r1_zero_reward_fn)

    def problems(self, split: str) -> list[Problem]:
        return [Problem(a, b) for a, b in _split_pairs(split)]

    def prompt(self, problem: Problem) -> str:
        return format_prompt(problem)


ADDITION = AdditionTask()
