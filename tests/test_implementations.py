"""course.submissions.implementations: the learner's own stages, read from notebooks, run a training loop;
course.lab.reference_run: the reference's run of notebook 08, recorded for student editions."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
import torch

import course
import course.advantages
import course.lab.reference_run
from course.lab.reference_run import (
    NOTEBOOK_RUN,
    RECORDED,
    compared_fields,
    recorded_config,
    recorded_reference_run,
)
from course.loop.tasks import make_problems
from course.loop.train import TrainConfig, train
from course.registry import GRADED_FUNCTIONS
from course.submissions.implementations import (
    StageNotWritten,
    earlier_stages,
    load_implementations,
    missing_references,
    reference_implementations,
    stand_in_for_stubs,
)
from course.train import edition_notebooks, main

ROOT = course.advantages.__file__.rsplit("/course/", 1)[0]
# two steps of 4 problems x 4 samples: enough for groups with mixed rewards, so the weights move
SHORT_RUN = TrainConfig(steps=2, prompts_per_step=4, group_size=4, eval_problems=4, eval_samples=1,
                        eval_every=0, lr=1e-3)


def write_notebook(folder, name: str, *cells: str) -> None:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbformat.write(notebook, folder / name)


def test_the_blank_release_falls_back_to_the_reference_and_says_where_to_write():
    loaded = load_implementations(f"{ROOT}/notebooks")
    assert all(loaded[name] is getattr(course, name) for name in GRADED_FUNCTIONS)
    table = loaded.table()
    assert "not written in 03_advantages.ipynb" in table
    assert "7_train_step" in table and "yours" not in table


def test_a_later_stage_runs_on_the_learners_earlier_ones(tmp_path):
    # notebook 07 imports the advantages from course, as the release's does; the learner's own
    # version from notebook 03 is what its train step calls
    write_notebook(tmp_path, "03.ipynb",
                   'def compute_group_normalized_rewards(*args, **kwargs):\n    return "mine"')
    write_notebook(tmp_path, "06.ipynb",
                   "from course import compute_group_normalized_rewards\n\n"
                   "def grpo_train_step(*args, **kwargs):\n"
                   "    return compute_group_normalized_rewards(*args, **kwargs)")
    loaded = load_implementations(tmp_path)
    assert loaded["grpo_train_step"]() == "mine"
    assert loaded.origins["grpo_train_step"] == "yours (06.ipynb)"
    assert loaded.origins["compute_group_normalized_rewards"] == "yours (03.ipynb)"
    assert loaded["tokenize_prompt_and_output"] is course.tokenize_prompt_and_output  # not written


def test_a_stub_is_not_written_but_a_raise_inside_real_code_is(tmp_path):
    write_notebook(tmp_path, "03.ipynb",
                   'def compute_rollout_rewards(reward_fn, responses, truths):\n'
                   '    """Docstring."""\n    # YOUR CODE HERE\n    raise NotImplementedError()',
                   "def compute_group_normalized_rewards(rewards, group_size):\n"
                   "    if group_size < 1:\n        raise NotImplementedError('odd groups')\n"
                   "    return rewards")
    loaded = load_implementations(tmp_path)
    assert loaded.origins["compute_rollout_rewards"].startswith("reference")
    assert loaded.origins["compute_group_normalized_rewards"] == "yours (03.ipynb)"


def test_only_definitions_run_never_a_notebooks_loop(tmp_path):
    marker = tmp_path / "ran"
    write_notebook(tmp_path, "01.ipynb", f"open({str(marker)!r}, 'w').write('trained')",
                   "def tokenize_prompt_and_output(p, o, t):\n    return 1")
    load_implementations(tmp_path)
    assert not marker.exists()


def _unrevealed(monkeypatch, name: str) -> None:
    """Stage 3's `name` as a student edition that has not revealed it holds it: a stub."""
    def stub(*args, **kwargs):
        raise RuntimeError(f"course.{name} is not revealed yet")
    stub.__grader_stub__ = name
    monkeypatch.setattr(course.advantages, name, stub)


def test_a_cell_that_does_not_parse_is_named_with_its_line_not_called_unwritten(tmp_path, monkeypatch):
    write_notebook(tmp_path, "03_advantages.ipynb", "x = 1",
                   "def compute_group_normalized_rewards(*args):\n    return (1,\n")
    fallback = load_implementations(tmp_path)
    origin = fallback.origins["compute_group_normalized_rewards"]
    assert origin.startswith("reference") and "code cell 2 does not parse" in origin and "line 2" in origin
    assert "not written" not in origin
    _unrevealed(monkeypatch, "compute_group_normalized_rewards")
    with pytest.raises(StageNotWritten, match="code cell 2 does not parse.*line 2.*finish 03"):
        load_implementations(tmp_path)


def test_a_stage_neither_written_nor_revealed_names_the_notebook(tmp_path, monkeypatch):
    write_notebook(tmp_path, "01.ipynb", "x = 1")
    _unrevealed(monkeypatch, "compute_group_normalized_rewards")
    with pytest.raises(StageNotWritten, match="finish 03_advantages.ipynb.*reveal"):
        load_implementations(tmp_path)


def test_bad_notebooks_flag_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--notebooks", str(tmp_path / "missing")])
    assert exit_info.value.code == 2
    assert "argument --notebooks:" in capsys.readouterr().err


@pytest.mark.slow
def test_training_with_the_reference_implementations_is_the_default_run(tmp_path):
    default = train(SHORT_RUN, tmp_path / "default", progress=False)
    explicit = train(SHORT_RUN, tmp_path / "explicit", progress=False,
                     implementations=reference_implementations())
    weights = [torch.load(tmp_path / run / "policy.pt") for run in ("default", "explicit")]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # the same steps
    assert explicit["implementations"]["grpo_train_step"] == "reference (course.grpo_train_step)"
    assert default["implementations"] == "reference"


@pytest.mark.slow
def test_the_learners_train_step_is_the_one_that_steps(tmp_path):
    """A train step that takes no optimizer step leaves the warm start's weights as they were."""
    write_notebook(tmp_path, "06.ipynb",
                   "import torch\n\ndef grpo_train_step(model, *args, **kwargs):\n"
                   "    return torch.zeros(()), {k: 0.0 for k in ('token_entropy', "
                   "'gradient_norm', 'loss', 'reward_mean', 'format_reward_mean', 'answer_reward_mean')}")
    learner = load_implementations(tmp_path)
    train(SHORT_RUN, tmp_path / "still", progress=False, implementations=learner)
    train(SHORT_RUN, tmp_path / "moved", progress=False)
    still, moved = (torch.load(tmp_path / run / "policy.pt") for run in ("still", "moved"))
    from course.loop.models import load_model_and_tokenizer

    warm = load_model_and_tokenizer(TrainConfig().checkpoint)[0].state_dict()
    assert all(torch.equal(still[k], warm[k]) for k in warm)
    assert any(not torch.equal(moved[k], warm[k]) for k in warm)


def test_earlier_stages_are_the_reference_where_it_is_available(tmp_path):
    write_notebook(tmp_path, "03.ipynb",
                   'def compute_group_normalized_rewards(*args, **kwargs):\n    return "mine"')
    uses = earlier_stages("4_losses", tmp_path)
    assert list(uses.functions) == ["tokenize_prompt_and_output", "compute_entropy",
                                    "get_response_log_probs", "compute_rollout_rewards",
                                    "compute_group_normalized_rewards"]
    assert uses["compute_group_normalized_rewards"] is course.compute_group_normalized_rewards


def test_an_unrevealed_earlier_stage_is_the_learners_own(tmp_path, monkeypatch):
    write_notebook(tmp_path, "03.ipynb",
                   'def compute_group_normalized_rewards(*args, **kwargs):\n    return "mine"')
    _unrevealed(monkeypatch, "compute_group_normalized_rewards")
    uses = earlier_stages("7_train_step", tmp_path)  # stage 7 itself is not written: no matter
    assert uses["compute_group_normalized_rewards"]() == "mine"
    assert uses.origins["compute_group_normalized_rewards"] == "yours (03.ipynb)"
    assert uses["compute_rollout_rewards"] is course.compute_rollout_rewards
    _unrevealed(monkeypatch, "compute_rollout_rewards")
    # neither written nor revealed: left out, and said so, while the stages that exist still bind
    uses = earlier_stages("7_train_step", tmp_path)
    assert uses.missing == ("compute_rollout_rewards",) and "compute_rollout_rewards" not in uses.functions
    assert uses["compute_group_normalized_rewards"]() == "mine"
    assert uses["tokenize_prompt_and_output"] is course.tokenize_prompt_and_output
    assert re.search("compute_rollout_rewards +MISSING .*finish 03_advantages", uses.table())
    with pytest.raises(StageNotWritten, match="compute_rollout_rewards.*finish 03_advantages"):
        load_implementations(tmp_path)
    with pytest.raises(ValueError, match="stage must be one of"):
        earlier_stages("7_end_to_end", tmp_path)


def test_a_stand_in_for_a_stub_is_the_learners_never_the_reference(tmp_path, monkeypatch):
    """Once the learner's function stands where a stub stood (an edition's unrevealed stage), the
    module holds a function, but not the reference: asked again, the origin is still "yours"."""
    name = "compute_group_normalized_rewards"

    def stub(*args, **kwargs):
        raise RuntimeError("not revealed")

    stub.__grader_stub__ = name
    for module in (course, course.advantages):
        monkeypatch.setattr(module, name, stub)
    assert missing_references() == (name,)
    write_notebook(tmp_path, "03.ipynb", f'def {name}(*args, **kwargs):\n    return "mine"')
    first = earlier_stages("4_losses", tmp_path)
    assert course.advantages.compute_group_normalized_rewards() == "mine"  # stood in
    again = earlier_stages("4_losses", tmp_path)
    assert again.origins[name] == first.origins[name] == "yours (03.ipynb)"
    assert missing_references() == (name,)
    assert stand_in_for_stubs({name: first[name]}) == []  # nothing left to stand in for


def test_the_full_course_misses_no_reference_and_stage_not_written_reads_in_one_line():
    assert missing_references() == ()
    # what Jupyter shows for it (IPython's _render_traceback_ hook): the message, no traceback
    error = StageNotWritten("finish 03_advantages.ipynb")
    assert error._render_traceback_() == ["StageNotWritten: finish 03_advantages.ipynb"]


def test_course_train_finds_an_editions_notebooks_or_names_the_flag(tmp_path):
    missing = ("estimate_kl", "compute_rollout_rewards")
    with pytest.raises(ValueError, match=r"stage 3_advantages, 5_off_policy .*give --notebooks DIR"):
        edition_notebooks(missing, tmp_path)  # no edition here
    (tmp_path / "edition.json").write_text("{}")
    (tmp_path / "notebooks").mkdir()
    with pytest.raises(ValueError, match="holds no notebooks: give --notebooks"):
        edition_notebooks(missing, tmp_path)
    write_notebook(tmp_path / "notebooks", "03.ipynb", "x = 1")
    assert edition_notebooks(missing, tmp_path) == tmp_path / "notebooks"


def _notebook_config() -> dict:
    """The keyword arguments of notebook 08's TrainConfig(...), as literals (device aside)."""
    notebook = nbformat.read(Path(ROOT) / "solutions" / "08_end_to_end.ipynb", 4)
    source = next(c.source for c in notebook.cells if c.id == "08_train")
    call = next(node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "TrainConfig")
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg != "device"}


def test_the_recorded_reference_run_is_notebook_07s_run():
    assert replace(TrainConfig(), **_notebook_config()) == NOTEBOOK_RUN
    recorded = json.loads(RECORDED.read_text())
    assert set(recorded["config"]) <= set(compared_fields(NOTEBOOK_RUN))
    assert recorded_config(recorded) == compared_fields(NOTEBOOK_RUN)
    assert "torch" in recorded["machine"] and "CPUs" in recorded["machine"]
    summary, records = recorded_reference_run(replace(NOTEBOOK_RUN, device="cuda"))  # any device
    assert [r["step"] for r in records] == list(range(1, 61))
    evaluated = [r["step"] for r in records if "heldout_accuracy_greedy" in r]
    assert evaluated == [20, 40, 60] and records[-1]["heldout_accuracy_sampled"] == summary["accuracy_after"]
    assert summary["implementations"] == "reference"
    for key in ("accuracy", "greedy_accuracy"):  # what notebook 08 prints and plots of it
        assert 0 <= summary[f"{key}_before"] <= 1 and 0 <= summary[f"{key}_after"] <= 1
    with pytest.raises(ValueError, match=r"steps=100 \(recorded: 60\)"):
        recorded_reference_run(replace(NOTEBOOK_RUN, steps=100))


def _said(response: str) -> str:
    return response.split("<answer>")[-1].split("</answer>")[0]


def test_the_recorded_samples_are_held_out_answers_before_and_after():
    """Notebook 01 opens with them: each is a held-out problem, its reversed sum, and the greedy
    answers of the warm start and of the trained policy (4 and 6 right of 8, as 01 says)."""
    samples = json.loads(RECORDED.read_text())["samples"]
    held_out = {f"{p.a}+{p.b}" for p in make_problems(None, seed=0, split="test")}
    for sample in samples:
        problem = sample["prompt"].split("User: ")[1].split("\n")[0]
        a, b = map(int, problem.split("+"))
        assert problem in held_out and sample["answer"] == str(a + b)[::-1]
    right = [sum(_said(s[when]) == s["answer"] for s in samples) for when in ("before", "after")]
    assert len(samples) == 8 and right == [4, 6]


@pytest.mark.slow
def test_the_recorded_reference_run_is_still_what_the_reference_trains(tmp_path):
    """Its first steps, trained again here (held-out evaluation does not touch the training's
    randomness, so a small one will do): the same rollouts and the same first update, up to the
    float noise of another machine. A change to the loop or the stages makes it stale."""
    recorded = json.loads(RECORDED.read_text())["records"]
    train(replace(NOTEBOOK_RUN, steps=2, eval_problems=2, eval_samples=1, eval_every=0), tmp_path,
          progress=False)
    again = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for now, then in zip(again, recorded[:2]):
        for key in ("reward_mean", "format_reward_mean", "answer_reward_mean"):
            assert abs(now[key] - then[key]) <= 2 / 64, (key, now[key], then[key])  # 2 samples of 64
        assert abs(now["response_length"] - then["response_length"]) <= 0.25
    assert again[0]["gradient_norm"] == pytest.approx(recorded[0]["gradient_norm"], rel=1e-2)


def test_recording_needs_every_reference(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(course.lab.reference_run, "missing_references", lambda: ("estimate_kl",))
    with pytest.raises(SystemExit) as exit_info:
        course.lab.reference_run.main(["--out", str(tmp_path / "run.json")])
    assert exit_info.value.code == 2
    assert "estimate_kl is not here" in capsys.readouterr().err
    assert not (tmp_path / "run.json").exists()
