"""The recorded failure runs of notebook 07's lab (`course.failure_runs`): what ships, the command's
argument errors, and a real (tiny) recording."""

import json
import math

import pytest

from course.failure_runs import (
    HEALTHY,
    KEPT,
    LAB_ORDER,
    PER_STEP,
    RECORDED,
    RUNS,
    lab_runs,
    load_failure_run,
    main,
    signature,
    write_run,
)
from course.plotting import WATCH, failure_panel


@pytest.mark.parametrize("name", RUNS)
def test_recordings_load_and_hold_what_the_panels_draw(name):
    run = load_failure_run(name)
    assert run["name"] == name and run["changed"] == RUNS[name]
    assert [r["step"] for r in run["records"]] == list(range(1, HEALTHY.steps + 1))
    for _, key in WATCH:
        values = [r[key] for r in run["records"]]
        assert all(isinstance(v, (int, float)) for v in values), key
    assert (RECORDED / f"{name}.json").stat().st_size < 6000  # a few KB


def test_lab_runs_hide_the_names_in_lab_order():
    runs = lab_runs()
    assert list(runs) == [f"Run {letter}" for letter in "ABC"][:len(LAB_ORDER)]
    assert [run["name"] for run in runs.values()] == list(LAB_ORDER)
    assert "healthy" not in LAB_ORDER and set(LAB_ORDER) < set(RUNS)


def test_the_failure_signatures_are_in_the_recordings():
    """What the lab's reveal cells explain, as the shipped recordings hold it."""
    healthy = signature(load_failure_run("healthy")["records"])
    high_lr = signature(load_failure_run("high_lr")["records"])
    kl_strong = signature(load_failure_run("kl_strong")["records"])
    assert high_lr["reward last 10"] < 0.5 * healthy["reward last 10"]
    assert high_lr["KL max"] > 10 * healthy["KL max"]
    assert kl_strong["KL mean"] < 0.7 * healthy["KL mean"]
    assert kl_strong["held-out accuracy, end"] < healthy["held-out accuracy, end"]


@pytest.mark.parametrize("name", [name for name, changed in RUNS.items()
                                  if not changed.get("kl_beta") and changed.get("baseline") != "none"])
def test_no_group_with_signal_is_exactly_no_gradient(name):
    """Without a KL term the gradient comes from the advantages alone, and with the mean baseline
    they are all 0 exactly where no group's rewards differ: the logged fraction and the logged
    norm agree on that (without a baseline an all-correct group still has advantage 1)."""
    for record in load_failure_run(name)["records"]:
        assert (record["groups_with_signal"] == 0) == (record["gradient_norm"] == 0), record


def test_signature_by_hand():
    records = [{"step": s, "reward_mean": s / 10, "kl_to_reference": [0.0, 0.5, 0.1][s - 1],
                "gradient_norm": [0.0, 2.0, 0.0][s - 1], "response_length": [8, 6, 7][s - 1],
                "groups_with_signal": [1.0, 0.5, 0.0][s - 1], "format_reward_mean": [1, 0.75, 0.5][s - 1]}
               for s in (1, 2, 3)]
    got = signature(records)
    assert got["reward first 5"] == pytest.approx(0.2) and got["reward last 10"] == pytest.approx(0.2)
    assert got["KL mean"] == pytest.approx(0.2) and got["KL max"] == 0.5
    assert math.isnan(got["held-out accuracy, end"])
    records[1]["heldout_accuracy_sampled"] = 0.25
    assert signature(records)["held-out accuracy, end"] == 0.25
    assert got["gradient norm max"] == 2.0 and got["steps with gradient 0"] == 2
    assert (got["length min"], got["length max"]) == (6, 8)
    assert got["groups with signal (mean)"] == pytest.approx(0.5) and got["format rate min"] == 0.5


def test_a_record_without_a_panel_metric_is_refused_by_name(tmp_path):
    records = [{key: 1.0 for key in PER_STEP if key != "groups_with_signal"} | {"step": 1}]
    write_run(tmp_path / "healthy.json", {"name": "healthy", "records": records})
    with pytest.raises(ValueError, match="step 1 lacks groups_with_signal"):
        load_failure_run("healthy", tmp_path)
    with pytest.raises(FileNotFoundError, match="'high_lr' is not recorded"):
        load_failure_run("high_lr", tmp_path)


@pytest.mark.parametrize("argv, flag", [
    (["--runs", "healthy,typo"], "--runs: unknown run(s) typo"),
    (["--runs", "healthy,healthy"], "--runs: expected distinct names"),
    (["--runs", ","], "--runs: expected distinct names"),
    (["--steps", "0"], "--steps: must be >= 1, got 0"),
    (["--steps", "two"], "--steps: expected int, got 'two'"),
])
def test_argument_errors_name_the_flag(argv, flag, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path), *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and err.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_an_existing_recording_is_kept_without_force(tmp_path, capsys):
    (tmp_path / "healthy.json").write_text("mine")
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--runs", "healthy", "--steps", "1"])
    assert "pass --force" in capsys.readouterr().err
    assert (tmp_path / "healthy.json").read_text() == "mine"
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "file")])
    assert "is not a folder" in capsys.readouterr().err


def test_the_command_records_a_tiny_run(tmp_path):
    """Really trains (2 steps of the no-baseline run) and writes what the lab loads."""
    assert main(["--out", str(tmp_path), "--runs", "no_baseline", "--steps", "2"]) == 0
    run = load_failure_run("no_baseline", tmp_path)
    assert run["changed"] == RUNS["no_baseline"] and len(run["records"]) == 2
    assert set(PER_STEP) <= set(run["records"][0]) and set(run["records"][0]) <= set(KEPT)
    assert 0 <= run["records"][0]["groups_with_signal"] <= 1
    assert json.loads((tmp_path / "no_baseline.json").read_text())["made_by"] == "python -m course.failure_runs"
    figure = failure_panel(run["records"], load_failure_run("healthy")["records"], "Run X")
    assert [axis.get_title() for axis in figure.axes] == [title for title, _ in WATCH]
