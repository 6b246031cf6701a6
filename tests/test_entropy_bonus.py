"""The entropy bonus (`course.loop.entropy_bonus`): with SGD(lr=1) the update is −∇(L − c · Agg(H)) of
the naive objective (naive.full_batch_loss plus the float64 entropy of naive.entropy, aggregated by
naive.aggregate), for every normalization and 1..B micro-batches, to 1e-10; a bonus whose entropy
carries no gradient (the chunked head's, or a metric's under no_grad) misses it."""

import pytest
import torch
from naive import (
    aggregate,
    entropy,
    full_batch_loss,
    gradient,
    make_old_log_probs,
    make_rollout_batch,
    relative_difference,
    reward_fn,
    tokenize,
)

import course.loop.entropy_bonus
from course import grpo_train_step
from course.loop.entropy_bonus import train_step_with_entropy_bonus
from course.loop.train import TrainConfig, train
from course.train import main

pytestmark = pytest.mark.usefixtures("single_thread")

COEF, CONSTANT, TAU = 0.3, 40.0, 0.7


def naive_update(model, tokenizer, batch, mode, old):
    """−∇ of the naive GRPO loss (clipped, at τ) minus c · Agg(H of softmax(z/τ))."""
    tokens = tokenize(batch["prompts"], batch["responses"], tokenizer)
    constant = CONSTANT if mode == "constant" else None
    scaled = _TemperatureModel(model)
    loss = full_batch_loss(scaled, tokenizer, batch, "grpo", mode, old, 0.2, constant, normalizer="none")
    h = entropy(scaled(tokens["input_ids"]).logits)                                    # (B, T) float64
    mask = tokens["response_mask"]
    bonus = aggregate(h, mask, mode, CONSTANT if mode == "constant" else int(mask.sum()))
    return [-g for g in gradient(model, [loss - COEF * bonus])]


class _TemperatureModel(torch.nn.Module):
    """The model with its logits divided by τ (the distribution sampled at τ)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return type("Output", (), {"logits": self.model(input_ids).logits / TAU})()


def bonus_step(model, tokenizer, batch, gas, mode, old):
    before = [p.detach().clone() for p in model.parameters()]
    _, metadata = train_step_with_entropy_bonus(
        grpo_train_step, model, tokenizer, torch.optim.SGD(model.parameters(), lr=1.0), gas, None, reward_fn,
        batch["prompts"], batch["responses"], batch["ground_truths"], batch["group_size"], entropy_coef=COEF,
        loss_normalization=mode, normalization_constant=CONSTANT if mode == "constant" else None,
        temperature=TAU, advantage_normalizer="none", pg_method="grpo",
        old_log_probs=old, cliprange=0.2)
    return [p.detach() - b for p, b in zip(model.parameters(), before)], metadata


@pytest.mark.parametrize("mode", ["sequence", "token", "constant"])
def test_the_bonus_update_is_the_naive_one_for_any_micro_batching(make_model, tokenizer, mode):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    expected = naive_update(model, tokenizer, batch, mode, old)
    for gas in (1, 3, 8):
        update, metadata = bonus_step(make_model(torch.float64), tokenizer, batch, gas, mode, old)
        assert relative_difference(update, expected) < 1e-10, f"{gas=}"
        assert metadata["entropy_bonus"] < 0  # −c · H


def test_an_entropy_without_gradient_misses_the_check(make_model, tokenizer, monkeypatch):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    expected = naive_update(model, tokenizer, batch, "token", old)
    entropy_with_gradient = course.loop.entropy_bonus.compute_entropy
    # the chunked head's entropy: the right value, no gradient (0 · z keeps the graph)
    monkeypatch.setattr(course.loop.entropy_bonus, "compute_entropy",
                        lambda z: entropy_with_gradient(z.detach()) + 0 * z[..., 0])
    update, _ = bonus_step(make_model(torch.float64), tokenizer, batch, 2, "token", old)
    assert relative_difference(update, expected) > 0.01


def test_the_loop_trains_with_an_entropy_bonus(tmp_path):
    summary = train(TrainConfig(steps=2, prompts_per_step=2, group_size=4, eval_problems=4, eval_samples=1,
                                eval_every=0, entropy_coef=0.01, gradient_accumulation_steps=2,
                                logits_chunk_size=8), tmp_path, progress=False)
    assert summary["config"]["entropy_coef"] == 0.01
    records = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(records) == 2 and all('"entropy_bonus": -' in r for r in records)


def test_entropy_coef_under_data_parallelism_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit) as exit_info:
        main(["--entropy-coef", "0.01"])
    assert exit_info.value.code == 2 and "argument --entropy-coef" in capsys.readouterr().err
