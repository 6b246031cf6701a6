"""course.implementations: the learner's own stages, read from notebooks, run a training loop."""

from __future__ import annotations

import nbformat
import pytest
import torch

import course
import course.advantages
from course.implementations import (
    StageNotWritten,
    earlier_stages,
    load_implementations,
    reference_implementations,
)
from course.registry import GRADED_FUNCTIONS
from course.train import TrainConfig, main, train

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
    assert "not written in 03_rewards_and_advantages.ipynb" in table
    assert "6_train_step" in table and "yours" not in table


def test_a_later_stage_runs_on_the_learners_earlier_ones(tmp_path):
    # notebook 06 imports the advantages from course, as the release's does; the learner's own
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


def test_a_stage_neither_written_nor_revealed_names_the_notebook(tmp_path, monkeypatch):
    write_notebook(tmp_path, "01.ipynb", "x = 1")
    monkeypatch.setattr(course.advantages.compute_group_normalized_rewards, "__unrevealed__", True,
                        raising=False)
    with pytest.raises(StageNotWritten, match="finish 03_rewards_and_advantages.ipynb.*reveal"):
        load_implementations(tmp_path)


def test_bad_notebooks_flag_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--notebooks", str(tmp_path / "missing")])
    assert exit_info.value.code == 2
    assert "argument --notebooks:" in capsys.readouterr().err


def test_training_with_the_reference_implementations_is_the_default_run(tmp_path):
    default = train(SHORT_RUN, tmp_path / "default", progress=False)
    explicit = train(SHORT_RUN, tmp_path / "explicit", progress=False,
                     implementations=reference_implementations())
    weights = [torch.load(tmp_path / run / "policy.pt") for run in ("default", "explicit")]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # the same steps
    assert explicit["implementations"]["grpo_train_step"] == "reference (course.grpo_train_step)"
    assert default["implementations"] == "reference"


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
    from course.models import load_model_and_tokenizer

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
    monkeypatch.setattr(course.advantages.compute_group_normalized_rewards, "__unrevealed__", True,
                        raising=False)
    uses = earlier_stages("6_train_step", tmp_path)  # stage 6 itself is not written: no matter
    assert uses["compute_group_normalized_rewards"]() == "mine"
    assert uses.origins["compute_group_normalized_rewards"] == "yours (03.ipynb)"
    assert uses["compute_rollout_rewards"] is course.compute_rollout_rewards
    monkeypatch.setattr(course.advantages.compute_rollout_rewards, "__unrevealed__", True,
                        raising=False)
    with pytest.raises(StageNotWritten, match="compute_rollout_rewards.*finish 03_rewards"):
        earlier_stages("6_train_step", tmp_path)
    with pytest.raises(ValueError, match="stage must be one of"):
        earlier_stages("7_end_to_end", tmp_path)
