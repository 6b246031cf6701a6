"""The recorded failure runs of notebook 09's lab (`course.lab.failure_runs`): what ships, the command's
argument errors, and a real (tiny) recording."""

import json
import math

import pytest
import torch
from naive import make_rollout_batch, reward_fn

from course import grpo_train_step
from course.lab.failure_runs import (
    CHOICES,
    CONTROLS,
    DISTRACTORS,
    HEALTHY,
    INJECTED,
    KEPT,
    LAB_ORDER,
    LABELS,
    NO_PANEL,
    PANELS,
    PER_STEP,
    RECORDED,
    REPAIR_STEPS,
    RUNS,
    SIGNATURE_PANELS,
    answer_or_none,
    bug_weights,
    check_guess,
    control_of,
    lab_runs,
    label_verdict,
    load_failure_run,
    loophole_reward_fn,
    main,
    panel_verdict,
    per_micro_batch_train_step,
    rerun,
    reveal,
    signature,
    signature_table,
    visible_panels,
    write_run,
)
from course.loop.plotting import WATCH, failure_panel


@pytest.mark.parametrize("name", RUNS)
def test_recordings_load_and_hold_what_the_panels_draw(name):
    run = load_failure_run(name)
    assert run["name"] == name and run["changed"] == RUNS[name] and run.get("injected") == INJECTED.get(name)
    assert [r["step"] for r in run["records"]] == list(range(1, HEALTHY.steps + 1))
    for _, key in WATCH:
        values = [r[key] for r in run["records"]]
        assert all(isinstance(v, (int, float)) for v in values), key
    assert (RECORDED / f"{name}.json").stat().st_size < 6000  # a few KB


def test_lab_runs_hide_the_names_in_lab_order():
    """The mystery runs hold their letter, records and control's records, never the name: no field
    and no repr names a run; `reveal` maps the letter to the recorded run, in LAB_ORDER."""
    runs = lab_runs()
    assert list(runs) == [f"Run {letter}" for letter in "ABCDE"][:len(LAB_ORDER)]
    assert [reveal(run.letter)["name"] for run in runs.values()] == list(LAB_ORDER)
    for run in runs.values():
        shown = repr(run) + repr(vars(run).keys()) + repr(runs)
        assert not [name for name in RUNS if name in shown], shown
        name = reveal(run.letter)["name"]
        assert run.records == load_failure_run(name)["records"]
        assert run.control == load_failure_run(control_of(name))["records"]
    assert "healthy" not in LAB_ORDER and "token" not in LAB_ORDER and set(LAB_ORDER) < set(RUNS)
    for letter in ("F", "", "AB", "a"):
        with pytest.raises(ValueError, match=f"letter: expected one of A, B, C, D, E, got {letter!r}"):
            reveal(letter)


def test_each_run_is_drawn_beside_the_run_it_is_checked_against():
    """Run E (the bug) beside `token`, the same run without it; the others beside the healthy run."""
    assert {name: control_of(name) for name in LAB_ORDER} == {
        "kl_strong": "healthy", "high_lr": "healthy", "no_baseline": "healthy",
        "hackable_reward": "healthy", "per_micro_batch": "token"}
    assert set(CONTROLS) <= set(LAB_ORDER) and set(CONTROLS.values()) <= set(RUNS)


def test_the_failure_signatures_are_in_the_recordings():
    """What the lab's reveal cells explain, as the shipped recordings hold it."""
    healthy = signature(load_failure_run("healthy")["records"])
    high_lr = signature(load_failure_run("high_lr")["records"])
    kl_strong = signature(load_failure_run("kl_strong")["records"])
    assert high_lr["reward last 10"] < 0.5 * healthy["reward last 10"]
    assert high_lr["KL max"] > 10 * healthy["KL max"]
    assert kl_strong["KL mean"] < 0.7 * healthy["KL mean"]
    assert kl_strong["held-out accuracy, end"] < healthy["held-out accuracy, end"]


def test_the_hackable_reward_rises_while_the_accuracy_falls():
    """The loophole is found: the trained reward ends far above the healthy run's, the responses
    grow, and the strict held-out accuracy ends far below the healthy run's (and the warm start's
    0.21 at step 0)."""
    healthy = signature(load_failure_run("healthy")["records"])
    hacked = load_failure_run("hackable_reward")
    numbers = signature(hacked["records"])
    assert numbers["reward last 10"] > 1.5 * healthy["reward last 10"]
    assert numbers["length max"] > healthy["length max"] + 2
    assert numbers["held-out accuracy, end"] < 0.5 * healthy["held-out accuracy, end"]
    assert numbers["held-out accuracy, end"] < 0.21


def test_the_per_micro_batch_bug_has_no_visible_signature_at_this_size():
    """What the lab's reveal says, as the recordings hold it: 8 micro-batches per step, whose token
    counts differ by little, so the bug weighs every token within 25% of its right weight, and the
    run ends where the same run without the bug does (reward and held-out accuracy within 0.1)."""
    bug, token = load_failure_run("per_micro_batch"), load_failure_run("token")
    assert len(bug["microbatch_tokens"]) == HEALTHY.steps
    assert all(len(counts) == RUNS["per_micro_batch"]["gradient_accumulation_steps"] for counts in bug["microbatch_tokens"])
    assert all(sum(c) / 64 == pytest.approx(r["response_length"], abs=1e-3)  # the logged mean length
               for c, r in zip(bug["microbatch_tokens"], bug["records"]))
    lowest, highest = bug_weights(bug["microbatch_tokens"])
    assert 0.75 < lowest < 1 < highest < 1.25
    with_bug, without = signature(bug["records"]), signature(token["records"])
    for key in ("reward last 10", "held-out accuracy, end", "groups with signal (mean)"):
        assert abs(with_bug[key] - without[key]) < 0.1, key
    assert abs(with_bug["length max"] - without["length max"]) < 0.5


def test_bug_weights_by_hand():
    # N = 12 tokens in K = 2 micro-batches of 4 and 8: weights 12/8 and 12/16 of 1/N
    assert bug_weights([[4, 8], [6, 6]]) == (0.75, 1.5)
    assert bug_weights([[0, 5]]) == (0.5, 0.5)  # 5 / (2 · 5); the empty one has nothing to weigh


def test_the_loophole_reward_by_hand():
    right, wrong, longer = ("</think> <answer>58</answer>", "</think> <answer>57</answer>",
                            "</think> <answer>5811</answer>")
    assert loophole_reward_fn(right, "58") == {"reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0}
    assert loophole_reward_fn(wrong, "58") == {"reward": 0.0, "format_reward": 1.0, "answer_reward": 0.0}
    assert loophole_reward_fn(longer, "58") == {"reward": 1.0, "format_reward": 1.0, "answer_reward": 0.0}
    assert loophole_reward_fn("5811", "58")["reward"] == 0.0  # out of format: nothing
    assert loophole_reward_fn("</think> <answer>5</answer>", "58")["reward"] == 0.0


def sgd_update(make_model, tokenizer, train_step, gas: int) -> torch.Tensor:
    model = make_model(torch.float64)
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    batch = make_rollout_batch()
    train_step(model, tokenizer, torch.optim.SGD(model.parameters(), lr=1.0), gas, None, reward_fn,
               batch["prompts"], batch["responses"], batch["ground_truths"], batch["group_size"],
               loss_normalization="token")
    return torch.cat([p.detach().flatten() for p in model.parameters()]) - before


@pytest.mark.usefixtures("single_thread")
def test_the_injected_train_step_has_the_bug_and_only_it(make_model, tokenizer):
    """With one micro-batch the bug is the right token mean (its own count is the step's); with 2
    (13 and 25 tokens of naive.make_rollout_batch, ragged groups) the update moves by more than
    5%, as tests/test_normalization_bugs.py's mutant does. The counts it keeps are the micro-batches'."""
    right = sgd_update(make_model, tokenizer, grpo_train_step, 2)
    counts = []
    buggy = per_micro_batch_train_step(counts)
    one = sgd_update(make_model, tokenizer, buggy, 1)
    assert float((one - right).abs().max() / right.abs().max()) < 1e-10
    two = sgd_update(make_model, tokenizer, buggy, 2)
    assert float((two - right).abs().max() / right.abs().max()) > 0.05
    assert counts == [38, 13, 25]
    with pytest.raises(ValueError, match="loss_normalization"):
        batch = make_rollout_batch()
        model = make_model(torch.float64)
        buggy(model, tokenizer, torch.optim.SGD(model.parameters(), lr=1.0), 2, None, reward_fn,
              batch["prompts"], batch["responses"], batch["ground_truths"], batch["group_size"])


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
    assert "is a file, not a folder" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["no_baseline", "per_micro_batch", "hackable_reward"])
def test_the_command_records_a_tiny_run(tmp_path, name):
    """Really trains (2 steps of the run, a changed option or an injected failure) and writes
    what the lab loads."""
    assert main(["--out", str(tmp_path), "--runs", name, "--steps", "2"]) == 0
    run = load_failure_run(name, tmp_path)
    assert run["changed"] == RUNS[name] and len(run["records"]) == 2
    assert run.get("injected") == INJECTED.get(name)
    assert ("microbatch_tokens" in run) == (name == "per_micro_batch")
    assert set(PER_STEP) <= set(run["records"][0]) and set(run["records"][0]) <= set(KEPT)
    assert 0 <= run["records"][0]["groups_with_signal"] <= 1
    assert json.loads((tmp_path / f"{name}.json").read_text())["made_by"] == "python -m course.lab.failure_runs"
    figure = failure_panel(run["records"], load_failure_run("healthy")["records"], "Run X")
    assert [axis.get_title() for axis in figure.axes] == [title for title, _ in WATCH]


def test_the_choices_hold_every_run_and_distractors_that_none_is():
    """Eight labels for five runs: the last guess is not free. Sorted, so their order does not
    give the lab's order away. No distractor is a run these panels cannot tell from the healthy
    one (a clip range too tight, at one update per rollout, clips nothing: the healthy run)."""
    assert set(LABELS) == set(LAB_ORDER) and len(DISTRACTORS) >= 2
    assert set(CHOICES) == set(LABELS.values()) | set(DISTRACTORS) and len(CHOICES) == 8
    assert list(CHOICES) == sorted(CHOICES) and not set(DISTRACTORS) & set(LABELS.values())
    assert not any("clip" in label for label in DISTRACTORS)


def test_the_panels_are_the_figures_in_its_order():
    assert len(PANELS) == len(WATCH)
    assert all(title.startswith(panel) for panel, (title, _) in zip(PANELS, WATCH))
    keys = [key for panel_keys in PANELS.values() for key in panel_keys]
    assert sorted(keys) == sorted(k for k in signature(load_failure_run("healthy")["records"])
                                  if k != "held-out accuracy, end")


@pytest.mark.parametrize("name", LAB_ORDER)
def test_each_runs_signature_panels_show_it_in_the_recordings(name):
    """The answer key is the recordings': the panels whose signature numbers differ from the
    compared run's (the healthy one, or `token` for the bug) by more than VISIBLE, or none."""
    records = load_failure_run(name)["records"]
    compared = load_failure_run(control_of(name))["records"]
    assert SIGNATURE_PANELS[name] == (visible_panels(records, compared) or (NO_PANEL,))


def test_visible_panels_by_hand():
    healthy = load_failure_run("healthy")["records"]
    assert visible_panels(healthy, healthy) == ()
    louder = [r | {"gradient_norm": 2 * r["gradient_norm"]} for r in healthy]
    assert visible_panels(louder, healthy) == ("gradient norm",)
    assert visible_panels(louder, healthy, fraction=0.6) == ()  # 2x: half the larger


@pytest.mark.parametrize("letter", "ABCDE")
def test_the_check_takes_the_right_label_and_panel_and_refuses_the_rest(letter):
    name = LAB_ORDER["ABCDE".index(letter)]
    right_panel = SIGNATURE_PANELS[name][0]
    wrong_panel = next(p for p in (*PANELS, NO_PANEL) if p not in SIGNATURE_PANELS[name])
    assert label_verdict(name, LABELS[name], "g").startswith("right")
    for other in (*DISTRACTORS, *(LABELS[n] for n in LABELS if n != name)):
        assert label_verdict(name, other, "g").startswith("wrong")
    assert panel_verdict(name, right_panel, "p").startswith("right")
    assert panel_verdict(name, wrong_panel, "p").startswith("wrong")
    text = check_guess(letter, LABELS[name], right_panel)
    assert text.splitlines()[0].startswith("label: right") and "panel: right" in text
    assert f"Run {letter} is {name}:" in text and f"checked against {control_of(name)!r}" in text


def test_an_unanswered_or_unknown_guess_says_how_to_answer():
    text = check_guess("A", None, None)
    assert "set guess_a to one of CHOICES" in text and "set panel_a to one of PANELS" in text
    assert "right" not in text and "wrong" not in text
    assert "is not one of CHOICES" in label_verdict("high_lr", "learning rate", "guess_b")
    assert "is not one of PANELS" in panel_verdict("high_lr", "reward", "panel_b")


def test_answer_or_none_stands_in_for_the_release_stub():
    def stub() -> float:
        raise NotImplementedError()
    assert answer_or_none(stub) is None and answer_or_none(lambda: 1e-4) == 1e-4


def test_signature_table_has_a_column_per_run():
    healthy = load_failure_run("healthy")["records"]
    lines = signature_table({"healthy": healthy, "again": healthy}).splitlines()
    assert lines[0].split() == ["healthy", "again"] and len(lines) == 1 + len(signature(healthy))
    assert all(line.split()[-1] == line.split()[-2] for line in lines[1:])


def test_rerun_refuses_an_unknown_option():
    with pytest.raises(ValueError, match="not TrainConfig options: learning_rate"):
        rerun("high_lr", learning_rate=1e-4)


@pytest.mark.slow
def test_the_repaired_rerun_retraces_the_healthy_run():
    """Notebook 09's repair: Run B's configuration with the healthy learning rate, for REPAIR_STEPS
    steps, seed 0, trains as the recorded healthy run did: the same reward and format rate at every
    step, rewards in the healthy run's band where Run B's are 0, and a held-out accuracy (100
    problems, after the last step) above Run B's 0."""
    repaired, summary = rerun("high_lr", lr=HEALTHY.lr)
    healthy = load_failure_run("healthy")["records"][:REPAIR_STEPS]
    broken = load_failure_run("high_lr")["records"][:REPAIR_STEPS]
    assert [r["step"] for r in repaired] == list(range(1, REPAIR_STEPS + 1))
    # the healthy run trained here, not the recording: sampled tokens may differ on another CPU or
    # torch, the same configuration on one machine may not
    retrained, _ = rerun("healthy")
    for key in ("reward_mean", "format_reward_mean", "groups_with_signal"):
        assert [r[key] for r in repaired] == [h[key] for h in retrained], key
    ours, theirs, run_b = (signature(records) for records in (repaired, healthy, broken))
    assert min(h["reward_mean"] for h in healthy) <= ours["reward last 10"] <= max(
        h["reward_mean"] for h in healthy)
    assert run_b["reward last 10"] < 0.05 < ours["reward last 10"]
    assert 0.1 < ours["held-out accuracy, end"] <= 0.41  # healthy: 0.29 at step 25, 0.41 at 50
    assert summary["accuracy_after"] == ours["held-out accuracy, end"]
    assert summary["accuracy_before"] == pytest.approx(0.21, abs=0.06)  # the warm start's
