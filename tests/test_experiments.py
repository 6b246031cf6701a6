"""course.lab.experiments: notebook 08's written experiments change exactly the option they name, run
the learner's stages, and refuse bad arguments by name.

Whether each effect is larger than the seed noise is measured whole (two seeds, 25 to 50 steps, minutes)
by benchmarks/bench_experiments.py, in benchmarks/README.md ("Written experiments"); here the runs are
2 steps long."""

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
    assert len(table) == 2 + 2 * 2
    assert all(f"{key}, mean" in table[0] for key in EXPERIMENTS[name].metrics)
    assert "reward_mean, last 10" in table[0] and table[2].endswith("| 1.20")  # last 10: 0.3 .. 1.2
    figure = plot_experiment(name, results)
    assert len(figure.axes) == len(EXPERIMENTS[name].metrics)
    assert all(axis.get_ylabel() for axis in figure.axes) and len(figure.axes[0].lines) == 4


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
