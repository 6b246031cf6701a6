"""Sampled responses sorted by what went wrong: format failures, wrong answers, right answers.

A task's reward (`course.loop.tasks`, the contract of `compute_rollout_rewards`) scores a response
with two 0/1 parts, as r1-zero's does (Guo et al. 2025, arXiv 2501.12948, sec. 2.2.2: a format
reward and an accuracy reward; Stanford CS336 assignment 5, `r1_zero_reward_fn`):

    format failure   format_reward 0                      the response does not parse
    wrong answer     format_reward 1, answer_reward 0     it parses; the answer is not the truth
    right answer     format_reward 1, answer_reward 1

The two failures ask for different fixes (a format the policy never learned, or an answer it
gets wrong), and a mean reward hides which one a run has: the counts say which, and reading a
few examples of each says how. Notebook 08 sorts the held-out samples of the warm start and of
the trained policy. (`course.lab.reward_design` probes a reward with responses *written* to be of
each kind; this module sorts responses a policy *sampled*.)
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from course.loop.tasks import ADDITION, Task, TaskProblem

RewardFn = Callable[[str, str], dict[str, float]]
FORMAT_FAILURE, WRONG_ANSWER, RIGHT_ANSWER = "format failure", "wrong answer", "right answer"
KINDS = (FORMAT_FAILURE, WRONG_ANSWER, RIGHT_ANSWER)
# How a response is shown: escaped, then cut to this many characters.
WIDTH = 60
# Escapes that read better than \x0a; the quote, since `shown` quotes.
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", '"': '\\"'}


def kind_of(scores: dict[str, float]) -> str:
    """The kind of one response from its reward's `format_reward` and `answer_reward` (each 0 or
    1). A right answer out of the format is no kind: such a reward is refused by name."""
    parts = {key: scores.get(key) for key in ("format_reward", "answer_reward")}
    for key, value in parts.items():
        if value not in (0.0, 1.0):
            raise ValueError(f"reward_fn must return {key} 0 or 1, got {value!r}")
    if parts["answer_reward"] and not parts["format_reward"]:
        raise ValueError("reward_fn gave answer_reward 1 with format_reward 0: a right answer "
                         "must be in the format")
    return KINDS[int(parts["format_reward"]) + int(parts["answer_reward"])]


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if unicodedata.category(char).startswith("C"):  # control, format (bidi overrides), unassigned
        code = ord(char)
        return (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
                else f"\\U{code:08x}")
    return char


def escaped(text: str) -> str:
    """`text` on one line: newlines, tabs, backslashes, quotes and other control characters escaped
    (`\\n`, `\\x1b`, `\\u202e`), so that a response cannot break or restyle the lines around
    it."""
    return "".join(map(_escape, text))


def shown(text: str, width: int = WIDTH) -> str:
    """`text` escaped and quoted, cut to `width` characters with the number left out."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive int, got {width!r}")
    text = escaped(text)
    if len(text) <= width:
        return f'"{text}"'
    return f'"{text[:width]}"… ({len(text) - width} more characters)'


@dataclass(frozen=True)
class SortedResponses:
    """Every response with its ground truth, by kind, in the order they were given."""

    pairs: dict[str, list[tuple[str, str]]]  # kind -> [(response, ground truth)]

    @property
    def total(self) -> int:
        return sum(len(pairs) for pairs in self.pairs.values())

    @property
    def counts(self) -> dict[str, int]:
        return {kind: len(self.pairs[kind]) for kind in KINDS}

    def fraction(self, kind: str) -> float:
        """The share of the responses that are of `kind`."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        return self.counts[kind] / self.total if self.total else float("nan")

    def report(self, examples: int = 3, width: int = WIDTH) -> str:
        """The counts, then the first `examples` responses of each kind, each with the truth it
        was scored against, escaped and cut to `width` characters."""
        if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
            raise ValueError(f"examples must be a non-negative int, got {examples!r}")
        lines = [f"{self.total} responses: " + ", ".join(
            f"{self.counts[kind]} {kind}s ({self.fraction(kind):.3f})" for kind in KINDS)]
        for kind in KINDS:
            pairs = self.pairs[kind]
            lines.append(f"{kind}s, {min(examples, len(pairs))} of {len(pairs)}:")
            lines += [f"  truth {shown(truth, width)}: {shown(response, width)}"
                      for response, truth in pairs[:examples]]
        return "\n".join(lines)


def sort_responses(responses: Sequence[str], ground_truths: Sequence[str],
                   reward_fn: RewardFn) -> SortedResponses:
    """Score each response against its ground truth with `reward_fn` and sort it by kind."""
    if len(responses) != len(ground_truths):
        raise ValueError(f"responses and ground_truths must pair up, got {len(responses)} and "
                         f"{len(ground_truths)}")
    pairs: dict[str, list[tuple[str, str]]] = {kind: [] for kind in KINDS}
    for response, truth in zip(responses, ground_truths):
        pairs[kind_of(reward_fn(response, truth))].append((response, truth))
    return SortedResponses(pairs)


def sample_and_sort(model, tokenizer, problems: Sequence[TaskProblem], group_size: int = 8,
                    seed: int = 0, task: Task = ADDITION) -> SortedResponses:
    """`group_size` samples of each problem at temperature 1 (`sample_groups`, step 0: the same
    samples whatever else was drawn before), sorted with `task`'s reward."""
    from course.loop.rollout import sample_groups  # torch: only where something is sampled

    rollouts = sample_groups(model, tokenizer, list(problems), group_size, seed=seed, step=0,
                             task=task)
    return sort_responses(rollouts.responses, rollouts.repeated_ground_truths, task.reward_fn)
