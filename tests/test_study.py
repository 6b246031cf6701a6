"""course.lab.study: notebook 14's runner estimates a design's cost and refuses one over the
budget with what to cut, refuses bad designs by name before anything trains, stops on a Ctrl-C,
and tables mean ± std per arm as an independent computation does.

The one study that trains here is 2 arms × 3 seeds of 1 step (seconds); the solution notebook's
whole study is measured in benchmarks/README.md ("Your study")."""

import functools
import math
from dataclasses import asdict

import pytest

from course.cli import INTERRUPTED
from course.lab import study as study_module
from course.lab.failure_runs import HEALTHY, KEPT
from course.lab.reward_design import reward_holes
from course.lab.study import (
    MENU,
    OverBudget,
    Study,
    config_of,
    estimate_seconds,
    plot_study,
    run_study,
    shaped_reward_fn,
    study_table,
)
from course.loop.train_config import validate
from course.submissions.implementations import Implementations

HAND_COST = {"start": 1.0, "rollout": 0.01, "update": 0.005, "heldout": 0.02}
# two values of each knob that make a valid arm, and the options they change from HEALTHY
ARMS = {"loss": (("noclip", "grpo"), {"pg_method", "updates_per_rollout"}),
        "group_size": ((4, 8), {"group_size", "prompts_per_step"}),
        "lr": ((1e-4, 3e-4), {"lr"}), "normalization": (("sequence", "token"), {"normalization"}),
        "kl_beta": ((0.0, 0.1), {"kl_beta"}),
        "clip_higher": ((0.0, 0.28), {"pg_method", "updates_per_rollout", "clip_higher"}),
        "temperature": ((1.0, 0.7), {"temperature"}), "format_bonus": ((0.0, 0.1), set())}


def no_training(*args, **kwargs):
    pytest.fail("it trained")


def test_the_menu_is_covered():
    assert set(ARMS) == set(MENU)


@pytest.mark.parametrize("knob", ARMS)
def test_each_knob_changes_what_it_names_and_makes_valid_runs(knob):
    values, changed = ARMS[knob]
    study = Study(knob, values)
    configs = [config_of(study, value, 0) for value in values]
    for config in configs:
        validate(config, 1)
        assert config.prompts_per_step * config.group_size == 64  # the same rollouts per step
    base = asdict(config_of(study, values[0], 0))
    changed_from_healthy = {key for config in configs for key, value in asdict(config).items()
                            if value != asdict(HEALTHY)[key]}
    assert changed_from_healthy - {"steps", "eval_every", "threads"} <= changed
    if knob != "format_bonus":  # the reward is the task's, not an option
        assert {k for k, v in asdict(configs[1]).items() if base[k] != v} <= changed


def test_the_shaped_reward_pays_the_format_and_keeps_a_sound_order():
    reward = shaped_reward_fn(0.1)
    assert reward("</think> <answer>12</answer>", "12")["reward"] == pytest.approx(1.1)
    assert reward("</think> <answer>13</answer>", "12")["reward"] == pytest.approx(0.1)
    assert reward("12", "12")["reward"] == 0.0
    assert reward_holes(reward) == []


def test_the_estimate_is_the_hand_worked_sum(monkeypatch):
    """Per run: start + steps × 64 × (rollout + (updates − 1) × update) + held-out × heldout."""
    monkeypatch.setattr(study_module, "COST", HAND_COST)
    plain = Study("lr", (1e-4, 2e-4), seeds=(0, 1, 2), steps=10, eval_problems=50)
    assert estimate_seconds(plain) == pytest.approx(6 * (1 + 6.4 + 1.0))  # 50.4
    twice = Study("loss", ("grpo", "noclip", "none"), seeds=(0, 1, 2, 3), steps=10,
                  eval_problems=50)  # 2 updates per rollout
    assert estimate_seconds(twice) == pytest.approx(12 * (1 + 9.6 + 1.0))  # 139.2


def test_a_design_over_the_budget_is_refused_with_what_to_cut(monkeypatch):
    monkeypatch.setattr(study_module, "COST", HAND_COST)
    monkeypatch.setattr(study_module, "trained_records", no_training)
    over = Study("lr", (1e-4, 2e-4), steps=200, eval_problems=50)  # 6 × 130 s = 13 min
    with pytest.raises(OverBudget) as refused:
        run_study(over)
    message = str(refused.value)
    assert "about 13.0 min" in message and "over the budget of 10.0 min" in message, message
    assert "2 arms × 3 seeds of 200 steps" in message and "cut steps to 153 or fewer" in message
    fits, one_more = Study("lr", (1e-4, 2e-4), steps=153, eval_problems=50), \
        Study("lr", (1e-4, 2e-4), steps=154, eval_problems=50)
    assert estimate_seconds(fits) <= 600 < estimate_seconds(one_more)
    with pytest.raises(OverBudget, match="even 1 step per run is over it"):
        run_study(over, budget_s=10)
    with pytest.raises(ValueError, match="budget_s must be a positive number"):
        run_study(over, budget_s=0)


@pytest.mark.parametrize("design, said", [
    (dict(knob="nope", values=(1, 2)), "knob must be one of"),
    (dict(knob="lr", values=(1e-4,)), "values must be 2 or 3 values of lr"),
    (dict(knob="lr", values=(1e-4, 2e-4, 3e-4, 4e-4)), "values must be 2 or 3"),
    (dict(knob="lr", values=(1e-4, 1.0)), "values: lr must be <= 0.01, got 1.0"),
    (dict(knob="lr", values=(1e-4, 1e-4)), "values must differ: 0.0001 given twice"),
    (dict(knob="group_size", values=(3, 8)), "divides the 64 rollouts"),
    (dict(knob="loss", values=("grpo", "sapo")), "values: loss must be one of"),
    (dict(knob="lr", values="ab"), "values must be a sequence"),
    (dict(knob="lr", values=(1e-4, 2e-4), seeds=(0, 1)), "seeds must be at least 3"),
    (dict(knob="lr", values=(1e-4, 2e-4), seeds=(0, 1, True)), "seeds must be at least 3 ints"),
    (dict(knob="lr", values=(1e-4, 2e-4), seeds=(0, 1, 1)), "seeds must differ: 1 given twice"),
    (dict(knob="lr", values=(1e-4, 2e-4), seeds=(0, 1, -1)), "seeds must be in"),
    (dict(knob="lr", values=(1e-4, 2e-4), steps=0), "steps must be a positive int"),
    (dict(knob="lr", values=(1e-4, 2e-4), eval_problems=2.5), "eval_problems must be")])
def test_a_bad_design_is_refused_by_name(design, said):
    with pytest.raises(ValueError, match=said.replace("(", r"\(")):
        Study(**design)


@pytest.mark.parametrize("argv, said", [
    (["--knob", "lr", "--values", "1e-4", "1e-4"], "argument --values: 0.0001 given twice"),
    (["--knob", "lr", "--values", "1e-4", "x"], "argument --values: lr takes float values"),
    (["--knob", "lr", "--values", "1e-4", "2"], "argument --values: lr must be <= 0.01"),
    (["--knob", "lr", "--values", "1e-4", "2e-4", "--seeds", "0", "1", "0"],
     "argument --seeds: 0 given twice"),
    (["--knob", "lr", "--values", "1e-4", "2e-4", "--seeds", "0", "1"],
     "argument --seeds: must be at least 3 ints"),
    (["--knob", "lr", "--values", "1e-4", "2e-4", "--seeds", "0", "1", "-1"],
     "argument --seeds: must be >= 0, got -1"),
    (["--knob", "lr", "--values", "1e-4", "2e-4", "--steps", "400"],
     "argument --budget: refused: the design needs about"),
    (["--knob", "lr", "--values", "1e-4", "2e-4", "--budget", "-5"], "argument --budget"),
    (["--knob", "nope", "--values", "1", "2"], "argument --knob: invalid choice")])
def test_the_command_refuses_in_one_line_before_any_run(argv, said, capsys, monkeypatch):
    monkeypatch.setattr(study_module, "trained_records", no_training)
    with pytest.raises(SystemExit) as stopped:
        study_module.main(argv)
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and said in error and len(error.splitlines()) == 1, error


def test_the_estimate_flag_prints_the_cost_and_trains_nothing(capsys, monkeypatch):
    monkeypatch.setattr(study_module, "trained_records", no_training)
    assert study_module.main(["--knob", "kl_beta", "--values", "0", "0.1", "--estimate"]) == 0
    assert "for 6 runs of 30 steps" in capsys.readouterr().out


def test_a_ctrl_c_amid_a_run_stops_at_once_and_prints_no_table(capsys, monkeypatch):
    """`train` returns a cut-short run's summary: the command stops there and exits 130."""
    trained = []

    def cut_short(*args, **kwargs):
        trained.append(args[1])
        return [{key: 0.5 for key in KEPT} | {"step": 1}], {"interrupted": True,
                                                              "wall_seconds": 1.0}

    monkeypatch.setattr(study_module, "trained_records", cut_short)
    assert study_module.main(["--knob", "lr", "--values", "1e-4", "2e-4"]) == INTERRUPTED
    said = capsys.readouterr()
    assert len(trained) == 1 and "±" not in said.out, said.out
    assert "interrupted (Ctrl-C) after 0 of 6 runs: no table" in said.err, said.err


def records(reward: float, grad: float, kl: float, accuracy: float, steps: int = 12) -> list:
    """A run whose metrics are constant but for the reward, which is 0 before the last 10 steps."""
    return [{"step": s, "reward_mean": reward if s > steps - 10 else 0.0, "gradient_norm": grad,
             "kl_to_reference": kl} | ({"heldout_accuracy_sampled": accuracy} if s == steps
                                       else {}) for s in range(1, steps + 1)]


def sample_std(xs):
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def test_the_table_is_mean_and_sample_std_over_the_seeds():
    """Against the formulas by hand: arm a's accuracies 0.2, 0.4, 0.6 are 0.400 ± 0.200; a
    population std (÷ n) would print 0.163, the mean over all steps of the reward 0.250."""
    a = {seed: records(0.3, 1.0 + seed, 0.01, acc) for seed, acc in zip((0, 1, 2), (0.2, 0.4, 0.6))}
    b = {seed: records(0.9, 1.0, 0.05 * (seed + 1), 0.45) for seed in (0, 1, 2)}
    table = study_table({"lr = 0.0001": a, "lr = 0.0003": b})
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()}
    assert "| 3 | 0.400 ± 0.200 | 0.300 ± 0.000 | 2.000 ± 1.000 | 0.010 ± 0.000 |" in rows[
        "lr = 0.0001"]
    assert f"0.100 ± {sample_std([0.05, 0.10, 0.15]):.3f}" in rows["lr = 0.0003"]
    gaps = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()
            if "−" in line}
    assert gaps["held-out accuracy"].endswith("| +0.050 | 0.400 | no |")  # 2 × 0.200
    assert gaps["reward, last 10 steps"].endswith("| +0.600 | 0.000 | yes |")
    assert gaps["KL, last 10 steps"].endswith(f"| +0.090 | {2 * sample_std([0.05, 0.1, 0.15]):.3f}"
                                              " | no |")
    figure = plot_study({"lr = 0.0001": a, "lr = 0.0003": b})
    assert len(figure.axes) == 4 and all(axis.get_ylabel() for axis in figure.axes)


@pytest.mark.slow
@pytest.mark.usefixtures("single_thread")
def test_a_study_trains_every_arm_and_seed_with_the_learners_stages():
    """2 arms × 3 seeds of 1 step: six runs, each on the learner's train step, one progress line
    each, and a table of n = 3 per arm."""
    from course.train_step import grpo_train_step

    calls, lines = [], []

    @functools.wraps(grpo_train_step)  # the same signature: what train() asks of a train step
    def learners_step(*args, **kwargs):
        calls.append(kwargs.get("pg_method"))
        return grpo_train_step(*args, **kwargs)

    yours = Implementations({"grpo_train_step": learners_step}, {"grpo_train_step": "yours"})
    design = Study("kl_beta", (0.0, 0.5), seeds=(0, 1, 2), steps=1, eval_problems=4)
    results = run_study(design, yours, log=lines.append)
    assert len(calls) == 6 and len(lines) == 6 and lines[-1].startswith("[6/6] kl_beta = 0.5")
    assert list(results) == ["kl_beta = 0", "kl_beta = 0.5"]
    assert all(list(runs) == [0, 1, 2] for runs in results.values())
    assert all(len(r) == 1 and "heldout_accuracy_sampled" in r[0] for runs in results.values()
               for r in runs.values())
    assert "| kl_beta = 0.5 | 3 |" in study_table(results)
