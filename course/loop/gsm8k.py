"""GSM8K-style grade-school math as a `course.loop.tasks.Task`: problems from a local JSONL file,
rewarded by a math-answer verifier.

Each line of the file is one problem in GSM8K's own format (Cobbe et al. 2021, arXiv 2110.14168;
`openai/gsm8k` on the Hugging Face hub): `{"question": ..., "answer": ...}` where the answer is a
worked solution whose last line is `#### N`, N the final number. The prompt asks the policy to
reason and end with the same marker, so one rule reads both the ground truth and the response:

    response: "... so she has 5 + 3 = 8 apples.\\n#### 8<|im_end|>"

Reward (the contract of `compute_rollout_rewards`): `format_reward` 1 when the response has a
`#### ` line with a number on it; `answer_reward` 1 when, in addition, that number equals the
ground truth by `math_verify.verify` (Hugging Face Math-Verify, the verifier of open-r1 and TRL's
`accuracy_reward`; numbers with thousands separators, `$`, fractions and decimals compare by
value); `reward` = `answer_reward` (as the r1-zero reward of CS336 A5). The verifier runs with its
timeouts off (its default `signal.alarm` works only in the main thread).

The train/test split of one file is fixed by each question's hash, not by order or seed: 20% of
the questions are held out, the same on every machine and for every run seed. A hub dataset loads
only with `allow_download` (`load_hub_gsm8k`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from course.loop.models import chat_prompt

INSTRUCTION = ("Solve the problem. Reason step by step, then give the final answer as a number "
               "on a last line of the form '#### <number>'.")
# The final-answer line: "#### 1,234.5" (GSM8K writes thousands with commas, sometimes a $).
FINAL_ANSWER = re.compile(r"####\s*\$?\s*(?P<number>-?[\d,]*\.?\d+)")
HELD_OUT_PERCENT = 20
SPLITS = ("train", "test")


@dataclass(frozen=True)
class MathProblem:
    """One GSM8K problem: the question, the final number (the ground truth) and the solution."""

    question: str
    answer: str
    solution: str = ""


def final_answer(text: str) -> str | None:
    """The number on the last `#### N` line of `text` (commas removed), or None."""
    matches = list(FINAL_ANSWER.finditer(text))
    return matches[-1].group("number").replace(",", "") if matches else None


def load_gsm8k_jsonl(path: str | Path) -> list[MathProblem]:
    """Problems from a GSM8K-format JSONL file; ValueError naming the file and line of a bad one."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data file {str(path)!r} does not exist")
    problems = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where}: not a JSON object ({error.msg})") from None
        if not isinstance(record, dict) or not all(isinstance(record.get(k), str)
                                                   for k in ("question", "answer")):
            raise ValueError(f"{where}: needs string fields 'question' and 'answer'")
        truth = final_answer(record["answer"])
        if truth is None:
            raise ValueError(f"{where}: the answer has no final '#### N' line")
        problems.append(MathProblem(record["question"].strip(), truth, record["answer"]))
    if not problems:
        raise ValueError(f"data file {str(path)!r} holds no problems")
    return problems


def load_hub_gsm8k(name: str, allow_download: bool) -> list[MathProblem]:
    """All problems (train then test) of a hub dataset in GSM8K's format, e.g. `openai/gsm8k`;
    only with `allow_download` (ValueError otherwise), and only where `datasets` is installed."""
    if not allow_download:
        raise ValueError(f"data {name!r} is not a local file; to download the hub dataset, "
                         "pass --allow-download (nothing downloads without it)")
    try:
        from datasets import load_dataset
    except ImportError:
        raise ValueError("a hub dataset needs the datasets library: pip install datasets") from None
    splits = load_dataset(name, "main")
    return [MathProblem(row["question"].strip(), final_answer(row["answer"]), row["answer"])
            for split in ("train", "test") for row in splits[split]]


def is_held_out(question: str) -> bool:
    """Whether a question is in the test split: by its hash, the same everywhere."""
    digest = hashlib.blake2b(question.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 100 < HELD_OUT_PERCENT


def math_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """`reward`, `format_reward`, `answer_reward` (each 0.0 or 1.0) of one response."""
    predicted = final_answer(response)
    if predicted is None:
        return {"reward": 0.0, "format_reward": 0.0, "answer_reward": 0.0}
    correct = float(_same_number(predicted, ground_truth))
    return {"reward": correct, "format_reward": 1.0, "answer_reward": correct}


def _same_number(predicted: str, ground_truth: str) -> bool:
    from math_verify import ExprExtractionConfig, parse, verify

    # both strings are plain numbers (FINAL_ANSWER), so parsing cannot hang: no timeout, no warning
    # of it
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    config = [ExprExtractionConfig()]
    gold = parse(ground_truth.replace(",", ""), extraction_config=config, parsing_timeout=None)
    guess = parse(predicted, extraction_config=config, parsing_timeout=None)
    return bool(gold and guess and verify(gold, guess, timeout_seconds=None))


class GSM8KTask:
    """GSM8K-style problems behind the `Task` interface; prompts use the tokenizer's chat template
    where it has one (`course.loop.models.chat_prompt`)."""

    name = "gsm8k"
    reward_fn = staticmethod(math_reward_fn)

    def __init__(self, problems: list[MathProblem], tokenizer):
        self.tokenizer = tokenizer
        self._splits = {split: [p for p in problems if is_held_out(p.question) == (split == "test")]
                        for split in SPLITS}

    def problems(self, split: str) -> list[MathProblem]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return self._splits[split]

    def prompt(self, problem: MathProblem) -> str:
        return chat_prompt(self.tokenizer, f"{problem.question}\n{INSTRUCTION}")
