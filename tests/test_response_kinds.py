"""course.lab.response_kinds: hand-made responses of each kind land in their kind, the report shows
them escaped and cut, and a reward that breaks the 0/1 contract is refused by name."""

from __future__ import annotations

import pytest

from course.lab.response_kinds import (
    FORMAT_FAILURE,
    KINDS,
    RIGHT_ANSWER,
    WRONG_ANSWER,
    escaped,
    kind_of,
    sample_and_sort,
    shown,
    sort_responses,
)
from course.loop.tasks import r1_zero_reward_fn

# 37+48 = 85, answered reversed: "58". Each response with the kind worked out by hand.
HAND_MADE = [
    ("</think> <answer>58</answer>", RIGHT_ANSWER),
    ("</think> <answer>58</answer><eos>", RIGHT_ANSWER),
    ("</think> <answer>85</answer>", WRONG_ANSWER),       # the sum, not reversed
    ("</think> <answer> 5 8</answer>", WRONG_ANSWER),     # parses; " 5 8" is not "58"
    ("58", FORMAT_FAILURE),                               # the right digits, no format
    ("</think><answer>58</answer>", FORMAT_FAILURE),      # no space after </think>
    ("</think> <answer>58", FORMAT_FAILURE),              # cut off before </answer>
    ("", FORMAT_FAILURE),
]


def test_hand_made_responses_sort_into_their_kinds():
    responses = [response for response, _ in HAND_MADE]
    sorted_ = sort_responses(responses, ["58"] * len(responses), r1_zero_reward_fn)
    expected = {kind: [r for r, k in HAND_MADE if k == kind] for kind in KINDS}
    assert {kind: [r for r, _ in sorted_.pairs[kind]] for kind in KINDS} == expected
    assert sorted_.counts == {FORMAT_FAILURE: 4, WRONG_ANSWER: 2, RIGHT_ANSWER: 2}
    assert sorted_.total == 8 and sorted_.fraction(FORMAT_FAILURE) == 0.5


@pytest.mark.parametrize("scores, kind", [
    ({"reward": 0.0, "format_reward": 0.0, "answer_reward": 0.0}, FORMAT_FAILURE),
    ({"reward": 0.0, "format_reward": 1.0, "answer_reward": 0.0}, WRONG_ANSWER),
    ({"reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0}, RIGHT_ANSWER),
])
def test_the_kind_reads_both_parts_of_the_reward(scores, kind):
    # an answer-only sorter calls a format failure a wrong answer; a format-only one, a wrong
    # answer a right one: each row catches one of them
    assert kind_of(scores) == kind


@pytest.mark.parametrize("scores, named", [
    ({"format_reward": 0.0, "answer_reward": 1.0}, "answer_reward 1 with format_reward 0"),
    ({"format_reward": 0.5, "answer_reward": 0.0}, "format_reward 0 or 1, got 0.5"),
    ({"format_reward": 1.0}, "answer_reward 0 or 1, got None"),
])
def test_a_reward_outside_the_contract_is_refused_by_name(scores, named):
    with pytest.raises(ValueError, match=named):
        kind_of(scores)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="responses and ground_truths must pair up, got 2 and 1"):
        sort_responses(["a", "b"], ["58"], r1_zero_reward_fn)
    sorted_ = sort_responses(["58"], ["58"], r1_zero_reward_fn)
    for call, named in ((lambda: sorted_.fraction("wrong"), "kind must be one of"),
                        (lambda: sorted_.report(examples=-1), "examples must be"),
                        (lambda: shown("x", width=0), "width must be")):
        with pytest.raises(ValueError, match=named):
            call()


def test_a_response_cannot_break_or_restyle_the_report():
    # a newline would forge a report line; an ANSI escape recolours the terminal; a bidi override
    # reverses what follows it; a quote would end the quoted response early
    hostile = '</think> <answer>1\n  truth "58": "</think> <answer>58</answer>"\x1b[2J\u202e"'
    report = sort_responses([hostile], ["58"], r1_zero_reward_fn).report(width=200)
    assert report.count("\n") == 1 + 3  # the counts, then one heading per kind, one example
    assert "\x1b" not in report and "\u202e" not in report
    assert "\\n" in report and "\\x1b" in report and "\\u202e" in report
    assert escaped('a"b\\c\td') == 'a\\"b\\\\c\\td'
    assert escaped("é 5+8 = 13") == "é 5+8 = 13"  # printable text is kept as it is


def test_long_responses_are_cut_and_say_how_much():
    assert shown("x" * 10, width=10) == '"' + "x" * 10 + '"'
    assert shown("x" * 13, width=10) == '"' + "x" * 10 + '"… (3 more characters)'
    assert shown("\n" * 6, width=10) == '"' + "\\n" * 5 + '"… (2 more characters)'


def test_the_report_counts_and_shows_examples_of_each_kind():
    responses = [response for response, _ in HAND_MADE]
    report = sort_responses(responses, ["58"] * len(responses), r1_zero_reward_fn).report(2)
    lines = report.splitlines()
    assert lines[0] == ("8 responses: 4 format failures (0.500), 2 wrong answers (0.250), "
                        "2 right answers (0.250)")
    assert lines[1] == "format failures, 2 of 4:"
    assert lines[2] == '  truth "58": "58"'
    assert lines[4] == "wrong answers, 2 of 2:"
    assert lines[5] == '  truth "58": "</think> <answer>85</answer>"'
    assert sort_responses([], [], r1_zero_reward_fn).report().splitlines()[1] == (
        "format failures, 0 of 0:")


def test_sampled_responses_are_sorted_by_their_reward():
    from course.loop.models import load_model_and_tokenizer
    from course.loop.rollout import sample_groups
    from course.loop.tasks import make_problems
    from course.loop.train import WARM_START

    model, tokenizer = load_model_and_tokenizer(WARM_START)
    problems = make_problems(4, seed=1, split="test")
    sorted_ = sample_and_sort(model, tokenizer, problems, group_size=3, seed=7)
    rollouts = sample_groups(model, tokenizer, problems, 3, seed=7, step=0)  # the same samples
    rights = sum(r1_zero_reward_fn(r, t)["answer_reward"]
                 for r, t in zip(rollouts.responses, rollouts.repeated_ground_truths))
    assert sorted_.total == 12 and sorted_.counts[RIGHT_ANSWER] == rights
    assert sorted(r for pairs in sorted_.pairs.values() for r, _ in pairs) == sorted(
        rollouts.responses)
