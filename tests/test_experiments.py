"""course.lab.experiments: notebook 08's written experiments change exactly the option they name, run
the learner's stages, ask for a third seed exactly where an arm gap is under twice the seed gap, and
refuse bad arguments by name.

Whether each effect is larger than the seed noise is measured whole (two seeds and a third where
asked, 25 to 50 steps, minutes) by benchmarks/bench_experiments.py, in benchmarks/README.md
("Written experiments"); here the runs are 2 steps long, or stand-ins."""

import functools
import subprocess
import sys
from dataclasses import asdict, replace

import pytest

from course.cli import INTERRUPTED
from course.lab import compare, experiments
from course.lab.experiments import (
    EXPERIMENTS,
    experiment_table,
    gaps,
    needs_third_seed,
    plot_experiment,
    run_experiment,
)
from course.lab.failure_runs import HEALTHY, KEPT, rounded, trained_records
from course.loop.train_config import validate
from course.submissions.implementations import Implementations

# what each experiment is about: the options its two arms differ in
CHANGED = {"group_size": {"group_size", "prompts_per_step"}, "std": {"advantage_normalizer"},
           "clipping": {"pg_method"}}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_the_arms_differ_in_the_named_option_only_and_are_valid_runs(name):
    first, second = (replace(HEALTHY, **options) for options in EXPERIMENTS[name].arms.values())
    for config in (first, second):
        validate(config, 1)
    differ = {key for key, value in asdict(first).items() if asdict(second)[key] != value}
    assert differ == CHANGED[name]
    # the same rollouts per step in both arms: a budget, not a size, is compared
    assert first.prompts_per_step * first.group_size == second.prompts_per_step * second.group_size


def test_every_drawn_metric_is_recorded():
    for experiment in EXPERIMENTS.values():
        assert set(experiment.metrics) <= set(KEPT) and len(experiment.arms) == 2


def fake_results(name):
    records = [{key: 0.1 * step for key in KEPT} | {"step": step} for step in range(1, 13)]
    return {arm: {0: records, 1: records} for arm in EXPERIMENTS[name].arms}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_the_table_and_the_figure_show_every_arm_seed_and_metric(name):
    results = fake_results(name)
    table = experiment_table(name, results).splitlines()
    assert len(table) == 2 + 2 * 2 + 1 + 2 + len(EXPERIMENTS[name].metrics) + 2
    assert all(f"{key}, mean" in table[0] for key in EXPERIMENTS[name].metrics)
    assert "reward_mean, last 10" in table[0] and "| 0.750 |" in table[2]  # last 10: 0.3 .. 1.2
    assert table[-1] == "held-out accuracy after | 0.000 | 0.000 | no: within the seed noise"
    one_seed = experiment_table(name, {arm: {0: runs[0]} for arm, runs in results.items()})
    assert one_seed.splitlines()[-1] == "one seed: no seed gap to hold the arm gaps against"
    figure = plot_experiment(name, results)
    assert len(figure.axes) == len(EXPERIMENTS[name].metrics)
    assert all(axis.get_ylabel() for axis in figure.axes) and len(figure.axes[0].lines) == 4


def run_of(arm: int, seed: int, reward: dict) -> list[dict]:
    """12 steps of arm `arm`, seed `seed`: `reward[(arm, seed)]` at every step, other metrics 0."""
    return [{key: 0.0 for key in KEPT} | {"step": step, "reward_mean": reward[(arm, seed)]}
            for step in range(1, 13)]


def std_results(reward: dict, seeds=(0, 1)):
    return {label: {seed: run_of(arm, seed, reward) for seed in seeds}
            for arm, label in enumerate(EXPERIMENTS["std"].arms)}


# arm 0 at 0.30 and 0.33 (seed gap 0.03), arm 1 at 0.35 or 0.38 plus the same 0.03: an arm gap
# of 0.05 is under twice the seed gap (a third seed), 0.08 is not; the rule "arm gap under the
# seed gap" would call neither, the rule "under three seed gaps" both
CLOSE = {(0, 0): 0.30, (0, 1): 0.33, (1, 0): 0.35, (1, 1): 0.38}
FAR = CLOSE | {(1, 0): 0.38, (1, 1): 0.41}


def test_a_third_seed_is_asked_for_where_the_arm_gap_is_under_twice_the_seed_gap():
    arm_gap, seed_gap = gaps("std", std_results(CLOSE))["reward_mean, mean"]
    assert arm_gap == pytest.approx(0.05) and seed_gap == pytest.approx(0.03)
    assert needs_third_seed("std", std_results(CLOSE)) == ["reward_mean, mean",
                                                           "reward_mean, last 10"]
    assert needs_third_seed("std", std_results(FAR)) == []
    # only the first two seeds decide: a third seed far off does not ask for itself again
    three = std_results(FAR | {(0, 2): 0.9, (1, 2): 0.0}, seeds=(0, 1, 2))
    assert needs_third_seed("std", three) == []
    # with three, the seed gap is an arm's range over all three: (0.9 - 0.30) for arm 0
    assert gaps("std", three)["reward_mean, mean"][1] == pytest.approx(0.6)


def fake_training(reward: dict, trained: list):
    """A stand-in for `trained_records`: arm 0 is std's first arm (GRPO's std)."""
    def train(name, config, implementations=None):
        arm = int(config.advantage_normalizer == "none")
        trained.append((arm, config.seed))
        return run_of(arm, config.seed, reward), {"wall_seconds": 1.0}
    return train


@pytest.mark.parametrize("reward, expected", [
    (CLOSE | {(0, 2): 0.31, (1, 2): 0.36}, [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (1, 2)]),
    (FAR, [(0, 0), (0, 1), (1, 0), (1, 1)]),
])
def test_the_runner_trains_the_third_seed_only_where_asked_and_the_table_says_why(
        reward, expected, monkeypatch):
    trained: list = []
    monkeypatch.setattr(experiments, "trained_records", fake_training(reward, trained))
    said: list[str] = []
    results = run_experiment("std", seeds=(0, 1), steps=12, log=said.append)
    assert trained == expected
    table = experiment_table("std", results).splitlines()
    if len(expected) == 6:
        assert said[4] == ("a third seed, 2: the arm gap of reward_mean, mean, reward_mean, "
                           "last 10 is under 2 x the seed gap")
        assert table[-1] == ("third seed 2: over seeds 0 and 1 the arm gap of reward_mean, mean, "
                             "reward_mean, last 10 was under 2 x its seed gap")
        # over three seeds: (0.35 + 0.38 + 0.36) / 3 - (0.30 + 0.33 + 0.31) / 3 = 0.05 > 0.03
        assert "reward_mean, mean | 0.050 | 0.030 | yes" in table
    else:
        assert not any(line.startswith("third seed") for line in table)
        assert "reward_mean, mean | 0.080 | 0.030 | yes" in table


def test_one_seed_or_three_never_train_another(monkeypatch):
    trained: list = []
    monkeypatch.setattr(experiments, "trained_records", fake_training(CLOSE | {(0, 2): 0.3,
                                                                               (1, 2): 0.3},
                                                                     trained))
    run_experiment("std", seeds=(0,), steps=12, log=lambda _: None)
    three = run_experiment("std", seeds=(0, 1, 2), steps=12, log=lambda _: None)
    assert len(trained) == 2 + 6
    # three seeds given: the table says which metrics the rule would have asked it for
    assert experiment_table("std", three).splitlines()[-1].startswith("third seed 2: over seeds")
    far = std_results(FAR | {(0, 2): 0.3, (1, 2): 0.38}, seeds=(0, 1, 2))
    assert "third seed" not in experiment_table("std", far)


def test_a_ctrl_c_in_the_third_seed_stops_the_experiment(monkeypatch):
    def cut_short_at_seed_2(name, config, implementations=None):
        arm = int(config.advantage_normalizer == "none")
        return run_of(arm, config.seed, CLOSE | {(0, 2): 0.3, (1, 2): 0.3}), {
            "wall_seconds": 1.0, "interrupted": config.seed == 2}

    monkeypatch.setattr(experiments, "trained_records", cut_short_at_seed_2)
    with pytest.raises(KeyboardInterrupt):
        run_experiment("std", seeds=(0, 1), steps=12, log=lambda _: None)


@pytest.mark.parametrize("arguments, named", [
    (("nope",), "name"), (("std", None, (0,), 0), "steps"), (("std", None, (0,), 2.5), "steps"),
    (("std", None, (), 1), "seeds"), (("std", None, (True,), 1), "seeds"),
    (("std", None, (0, 0), 1), "seeds must differ: 0 given twice"),
    (("std", None, (-1,), 1), "seeds must be in")])
def test_bad_arguments_are_refused_by_name(arguments, named):
    with pytest.raises(ValueError, match=named):
        run_experiment(*arguments)


@pytest.mark.slow
@pytest.mark.usefixtures("single_thread")
def test_a_run_is_the_lab_run_of_its_arm_with_the_learners_stages():
    """Both arms, one seed, 2 steps: each is the healthy run with its options (as trained by the lab's
    own runner), and the learner's stages are the ones that train."""
    from course.train_step import grpo_train_step

    calls = []

    @functools.wraps(grpo_train_step)  # the same signature: what train() asks of a train step
    def learners_step(*args, **kwargs):
        calls.append(1)
        return grpo_train_step(*args, **kwargs)

    yours = Implementations({"grpo_train_step": learners_step}, {"grpo_train_step": "yours"})
    results = run_experiment("std", yours, seeds=(0,), steps=2, log=lambda _: None)
    assert len(calls) == 4  # 2 arms x 2 steps
    for arm, options in EXPERIMENTS["std"].arms.items():
        config = replace(HEALTHY, **options, steps=2, eval_every=2, threads=1)
        expected, _ = trained_records("healthy", config)
        assert results[arm][0] == [{k: rounded(r[k]) for k in KEPT if k in r} for r in expected]


def test_the_command_refuses_an_unknown_experiment_in_one_line():
    run = subprocess.run([sys.executable, "-m", "course.lab.experiments", "nope"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "NAME" in run.stderr and "group_size" in run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.splitlines()) == 1


@pytest.mark.parametrize("argv, said", [
    (["--seeds", "0", "0"], "argument --seeds: 0 given twice"),
    (["std", "--seeds", "1", "0", "1"], "argument --seeds: 1 given twice"),
    (["--seeds", "-1"], "argument --seeds: must be >= 0, got -1"),
    (["std", "std"], "argument NAME: std given twice")])
def test_the_command_refuses_repeated_and_negative_seeds_by_name_before_any_run(
        argv, said, capsys, monkeypatch):
    monkeypatch.setattr(experiments, "trained_records", lambda *a, **k: pytest.fail("it trained"))
    with pytest.raises(SystemExit) as stopped:
        experiments.main(argv)
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and said in error and len(error.splitlines()) == 1, error


def test_a_ctrl_c_amid_a_run_stops_at_once_says_so_and_reports_nothing_as_whole(
        capsys, monkeypatch):
    """`train` returns a cut-short run's summary (it catches the Ctrl-C itself): the command stops
    there, exits 130 and prints no table, instead of training on and tabling the partial run."""
    trained = []

    def cut_short(*args, **kwargs):
        trained.append(args[1])
        records = [{key: 0.5 for key in KEPT} | {"step": 1}]
        return records, {"interrupted": True, "steps_done": 1, "steps": 12, "wall_seconds": 1.0}

    monkeypatch.setattr(experiments, "trained_records", cut_short)
    assert experiments.main(["std", "group_size", "--seeds", "0", "1"]) == INTERRUPTED
    said = capsys.readouterr()
    assert len(trained) == 1 and "---" not in said.out, said.out
    assert "interrupted (Ctrl-C) after 0 of 2 experiments" in said.err, said.err


def test_a_ctrl_c_outside_a_run_exits_130_in_one_line(capsys):
    def interrupted() -> int:
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as stopped:
        compare.command(interrupted, "no table")
    assert stopped.value.code == INTERRUPTED
    assert capsys.readouterr().err == "interrupted (Ctrl-C): no table\n"


def test_a_flag_whose_extra_is_missing_is_refused_naming_the_flag_and_the_extra(
        tmp_path, capsys, monkeypatch):
    """`--lora-rank` without peft: a usage error before any run (not peft's ImportError, or a
    ValueError from the first run's model), naming the flag and the `lora` extra; the module is
    one that exists nowhere, so that the test holds where peft is installed."""
    monkeypatch.setattr(compare, "EXTRAS", {"lora_rank": ("no_such_module_here", "lora")})
    out = tmp_path / "runs"
    with pytest.raises(SystemExit) as stopped:
        compare.main(["--out", str(out), "--lora-rank", "2", "--steps", "1"])
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and len(error.splitlines()) == 1, error
    assert "argument --lora-rank: needs no_such_module_here" in error and "`lora` extra" in error
    assert not out.exists()
