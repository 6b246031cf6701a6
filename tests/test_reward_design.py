"""course.lab.reward_design: notebook 09's reward exercise finds each loophole, accepts a shaped
reward that keeps the order, and its run is the lab's recorded run for the same reward."""

from dataclasses import replace

import pytest

from course.lab.failure_runs import HEALTHY, PER_STEP, loophole_reward_fn, rounded, trained_records
from course.lab.reward_design import reward_holes, train_with_reward
from course.loop.tasks import r1_zero_reward_fn


def test_a_sound_reward_has_no_holes():
    assert reward_holes(r1_zero_reward_fn) == []


def test_run_ds_loophole_is_found():
    holes = reward_holes(loophole_reward_fn)
    assert [hole.split(":")[0] for hole in holes] == [
        "the right answer with one more digit (Run D's loophole)", "the right answer twice"]


def test_a_substring_reward_shows_four_holes():
    def contains(response, truth):  # a common first try: the right digits anywhere
        return {"reward": float(truth in response)}

    found = [hole.split(":")[0] for hole in reward_holes(contains)]
    assert found == ["the right answer with one more digit (Run D's loophole)", "the right answer twice",
                     "the right answer without the tags", "the right answer, then more text"]


def format_bonus(response, truth):
    """r1-zero's reward plus 0.1 for the format: right 1.1 > wrong in the format 0.1 > out of it 0."""
    scores = r1_zero_reward_fn(response, truth)
    return {"reward": scores["reward"] + 0.1 * scores["format_reward"]}


def test_a_shaped_reward_that_keeps_the_order_has_no_holes():
    assert reward_holes(format_bonus) == []
    assert reward_holes(lambda r, t: {"reward": 5 + 2 * r1_zero_reward_fn(r, t)["reward"]}) == []


@pytest.mark.parametrize("shaping, holes", [
    # a bonus for leaving the format: the two responses out of it outrank a wrong one in it
    (lambda s, r: 0.1 * (1 - s["format_reward"]),
     ["the right answer without the tags", "the right answer, then more text"]),
    # partial credit for length: padding and repeating pay more than a plain wrong answer, and
    # trailing text more than a wrong answer in the format
    (lambda s, r: 0.05 * len(r) / 30, ["the right answer with one more digit (Run D's loophole)",
                                       "the right answer twice", "the right answer, then more text"]),
    # a format bonus as large as the answer: a wrong answer in the format pays what the right does
    (lambda s, r: -s["reward"] + s["format_reward"], ["a wrong answer",
     "the right answer with one more digit (Run D's loophole)", "the right answer twice",
     "an empty answer"]),
])
def test_a_shaped_reward_that_breaks_the_order_shows_its_holes(shaping, holes):
    def shaped(response, truth):
        scores = r1_zero_reward_fn(response, truth)
        return {"reward": scores["reward"] + shaping(scores, response)}

    assert [hole.split(":")[0] for hole in reward_holes(shaped)] == holes


def test_a_reward_that_is_not_a_number_is_a_hole():
    holes = reward_holes(lambda r, t: {"reward": float("nan")})
    assert len(holes) == 8 and all("not a finite number" in hole for hole in holes)


def test_a_reward_that_raises_is_reported_not_raised():
    def broken(response, truth):
        return {"score": 1.0}

    holes = reward_holes(broken)
    assert len(holes) == len({h.split(":")[0] for h in holes}) and all("raises KeyError" in h for h in holes)


@pytest.mark.slow
@pytest.mark.usefixtures("single_thread")
@pytest.mark.parametrize("reward_fn, lab_run", [(r1_zero_reward_fn, "healthy"),
                                                (loophole_reward_fn, "hackable_reward")])
def test_training_on_a_reward_is_the_lab_run_for_it(reward_fn, lab_run):
    # the lab's run trained here (the recordings hold another machine's floats): same config, seed
    records = train_with_reward(reward_fn, steps=3)
    expected, _ = trained_records(lab_run, replace(HEALTHY, steps=3))
    assert [{k: rounded(r[k]) for k in PER_STEP} for r in expected] == [{k: r[k] for k in PER_STEP} for r in records]
