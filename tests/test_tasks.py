"""The synthetic task: problems, splits, prompt format and the r1-zero reward."""

import pytest

from course.loop.models import build_tokenizer
from course.loop.tasks import (
    Problem,
    format_prompt,
    format_response,
    make_problems,
    r1_zero_reward_fn,
)


def test_answer_is_the_sum_with_digits_reversed():
    assert Problem(37, 48).answer == "58"        # 85
    assert Problem(50, 50).answer == "001"       # 100: the leading digit comes last
    assert Problem(0, 7).answer == "7"
    assert Problem(99, 99).answer == "891"       # 198


def test_splits_are_disjoint_seeded_and_sized():
    train = make_problems(None, seed=0, split="train")
    test = make_problems(1620, seed=0, split="test")
    assert len(set(train)) == 6480 and len(set(test)) == 1620
    assert not set(train) & set(test)
    assert set(train) | set(test) == {Problem(a, b) for a in range(10, 100) for b in range(10, 100)}
    assert make_problems(50, seed=3, split="test") == make_problems(50, seed=3, split="test")
    assert make_problems(50, seed=3, split="test") != make_problems(50, seed=4, split="test")
    # the split does not depend on the caller's seed: any seed draws from the same held-out set
    assert set(make_problems(300, seed=9, split="test")) <= set(test)


@pytest.mark.parametrize("kwargs", [dict(n=1621, seed=0, split="test"), dict(n=5, seed=0, split="dev"),
                                    dict(n=-1, seed=0, split="train")])
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError, match="n must|split must"):
        make_problems(**kwargs)


def test_prompt_and_response_are_r1_zero_format_and_tokenize_to_tags():
    problem = Problem(17, 48)
    assert format_prompt(problem) == "User: 17+48\nAssistant: <think>"
    assert format_response(problem) == "</think> <answer>56</answer>"
    tokenizer = build_tokenizer()
    ids = tokenizer.encode(format_response(problem) + "<eos>", add_special_tokens=False)
    tags = tokenizer.convert_tokens_to_ids(["</think>", "<answer>", "</answer>"])
    assert ids == [tags[0], tokenizer.convert_tokens_to_ids(" "), tags[1],
                   *tokenizer.convert_tokens_to_ids(["5", "6"]), tags[2], tokenizer.eos_token_id]


@pytest.mark.parametrize("response, expected", [
    ("</think> <answer>58</answer>", (1.0, 1.0, 1.0)),
    ("</think> <answer>58</answer><eos>", (1.0, 1.0, 1.0)),          # as sampled, stopped at EOS
    ("scratch 73+84 </think> <answer> 58 </answer>", (1.0, 1.0, 1.0)),  # thinking, spaces trimmed
    ("</think> <answer>85</answer>", (0.0, 1.0, 0.0)),               # left-to-right: wrong
    ("</think> <answer>580</answer>", (0.0, 1.0, 0.0)),
    ("</think> <answer></answer>", (0.0, 1.0, 0.0)),
    ("</think><answer>58</answer>", (0.0, 0.0, 0.0)),                # no space between the tags
    ("</think> <answer>58", (0.0, 0.0, 0.0)),                        # never closed
    ("</think> <answer>58</answer> and more", (0.0, 0.0, 0.0)),     # text after the answer
    ("<answer>58</answer>", (0.0, 0.0, 0.0)),                        # thinking never closed
    ("58", (0.0, 0.0, 0.0)),
])
def test_r1_zero_reward(response, expected):
    result = r1_zero_reward_fn(response, "58")
    assert (result["reward"], result["format_reward"], result["answer_reward"]) == expected
    assert all(isinstance(v, float) for v in result.values())


def test_reference_responses_earn_full_reward():
    for problem in make_problems(200, seed=0, split="test"):
        assert r1_zero_reward_fn(format_response(problem), problem.answer)["reward"] == 1.0
