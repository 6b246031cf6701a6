"""Regressions for three loss-normalization bugs that 2026 trainers shipped, each against
`course.grpo_train_step` and `course.aggregation`, each beside a mutant (the buggy denominator,
patched into the train step) that the same check catches.

The check is tests/test_train_step.py's: with SGD(lr=1) an optimizer step's update is −∇L of
the naive objective of exactly the rows that step trains on (naive.full_batch_loss: loops,
float64), to 1e-10, whatever the micro-batching. A denominator off by a factor moves the update
by that factor (SGD, not Adam, which would hide it), so the mutants miss by 5% or more.

The batch is naive.make_rollout_batch: two groups of G = 4 with 13 and 25 response tokens
(38 in all), ragged within each group.
"""

import pytest
import torch
from naive import (
    full_batch_loss,
    gradient,
    make_old_log_probs,
    make_rollout_batch,
    relative_difference,
    reward_fn,
)

import course.train_step
from course import grpo_train_step
from course.aggregation import aggregate_loss_across_microbatch, calculate_loss_and_backward

pytestmark = pytest.mark.usefixtures("single_thread")

CLIPRANGE = 0.2
EXACT, MISSED = 1e-10, 0.05  # the right denominator's error; the least a mutant's misses by


def rows_of(batch: dict, rows: list[int]) -> dict:
    """The rollout batch restricted to `rows` (whole groups)."""
    picked = {key: [batch[key][i] for i in rows] for key in ("prompts", "responses", "ground_truths", "rewards")}
    return {**picked, "group_size": batch["group_size"]}


def sgd_step(model, tokenizer, batch: dict, gas: int, mode: str, old=None, constant=None):
    """One grpo_train_step (Dr. GRPO advantages, the clipped loss when `old` is given) with
    SGD(lr=1) on `batch`; returns its update."""
    before = [p.detach().clone() for p in model.parameters()]
    grpo_train_step(model, tokenizer, torch.optim.SGD(model.parameters(), lr=1.0), gas, None, reward_fn,
                    batch["prompts"], batch["responses"], batch["ground_truths"], batch["group_size"],
                    advantage_normalizer="none", pg_method="grpo" if old is not None else "none",
                    old_log_probs=old, cliprange=CLIPRANGE if old is not None else None,
                    loss_normalization=mode, normalization_constant=constant)
    return [p.detach() - b for p, b in zip(model.parameters(), before)]


def expected_update(model, tokenizer, batch: dict, mode: str, old=None, constant=None):
    """−∇L of the naive objective of `batch` (its own B, N, or C)."""
    method = "grpo" if old is not None else "none"
    loss = full_batch_loss(model, tokenizer, batch, method, mode, old, CLIPRANGE, constant, normalizer="none")
    return [-g for g in gradient(model, [loss])]


# ------------------------------------------------------------------ more optimizer steps per rollout


def steps_over_one_rollout(make_model, tokenizer, gas: int) -> list[float]:
    """Two optimizer steps on one rollout, one group each (TRL's steps_per_generation = 2), token
    normalization, the clipped loss against the rollout's old log-probs: each step's error."""
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    errors = []
    for rows in ([0, 1, 2, 3], [4, 5, 6, 7]):  # the second step starts where the first left off
        step = rows_of(batch, rows)
        expected = expected_update(model, tokenizer, step, "token", old[rows])
        errors.append(relative_difference(sgd_step(model, tokenizer, step, gas, "token", old[rows]), expected))
    return errors


@pytest.mark.parametrize("gas", [1, 2, 4])
def test_each_optimizer_step_counts_its_own_tokens(make_model, tokenizer, monkeypatch, gas):
    """TRL huggingface/trl#5619 (fixed by #6024): with `steps_per_generation` above
    `gradient_accumulation_steps`, DAPO's token mean divided every micro-step by the completion
    tokens of the whole generation batch (`num_items_in_batch`), not of the optimizer step, so
    each update was scaled by (step tokens) / (rollout tokens): 0.5x for 4 generation steps over
    2 accumulation steps. Here two steps share one rollout: 13 and 25 of its 38 tokens."""
    assert max(steps_over_one_rollout(make_model, tokenizer, gas)) < EXACT

    def rollout_denominator(loss, mask, mode, sequences, tokens, constant=None, world_size=1):
        return calculate_loss_and_backward(loss, mask, mode, sequences, 38, constant, world_size)

    monkeypatch.setattr(course.train_step, "calculate_loss_and_backward", rollout_denominator)
    assert min(steps_over_one_rollout(make_model, tokenizer, gas)) > MISSED


# ------------------------------------------------------------------ micro-batch fallback denominators


def fallback_token_mean(loss, mask, mode, sequences, tokens, constant=None, world_size=1):
    """The mutant: token mode without the step's count, so `aggregate_loss_across_microbatch`
    falls back to the micro-batch's own tokens, weighted by the micro-batch's share of the rows
    (verl's sample-count loss_scale_factor)."""
    share = loss.shape[0] / sequences
    scaled = aggregate_loss_across_microbatch(loss, mask, "token") * share * world_size
    scaled.backward()
    return scaled.detach()


@pytest.mark.parametrize("gas", [2, 3, 8])
def test_no_micro_batch_falls_back_to_its_own_token_count(make_model, tokenizer, monkeypatch, gas):
    """verl verl-project/verl#7321: `agg_loss` in token-mean mode, called per micro-batch without
    the global `batch_num_tokens`, fell back to `loss_mask.sum()` of the current micro-batch, so
    the accumulated objective was a weighted mean of per-micro-batch token means, not the step's
    token mean (#5625: weighted by the sample ratio). `course.aggregation`'s own fallback (no
    constant: "this batch is the step") is right only for a whole step; the train step never
    uses it for a micro-batch."""
    batch = make_rollout_batch()
    expected = expected_update(make_model(torch.float64), tokenizer, batch, "token")
    assert relative_difference(sgd_step(make_model(torch.float64), tokenizer, batch, gas, "token"), expected) < EXACT
    monkeypatch.setattr(course.train_step, "calculate_loss_and_backward", fallback_token_mean)
    assert relative_difference(sgd_step(make_model(torch.float64), tokenizer, batch, gas, "token"), expected) > MISSED


def test_the_aggregation_fallback_is_the_whole_steps_token_mean():
    """Given the step's counts, micro-batch shares sum to the whole batch's loss; with their own
    counts (the fallback) they do not. Hand-worked: rows of 1 and 3 tokens, losses 4 and 1 each."""
    loss = torch.tensor([[4.0, 0, 0], [1, 1, 1]], requires_grad=True)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    whole = aggregate_loss_across_microbatch(loss, mask, "token")  # (4 + 3) / 4
    assert float(whole.detach()) == 7 / 4
    parts = [calculate_loss_and_backward(loss[i:i + 1], mask[i:i + 1], "token", 2, 4) for i in (0, 1)]
    assert float(sum(parts)) == 7 / 4  # 4/4 + 3/4
    fallback = [float(aggregate_loss_across_microbatch(loss[i:i + 1], mask[i:i + 1], "token").detach()) / 2 for i in (0, 1)]
    assert sum(fallback) == (4 + 1) / 2  # 5/2, not 7/4
    torch.testing.assert_close(loss.grad, torch.tensor([[0.25, 0, 0], [0.25, 0.25, 0.25]]))


# ------------------------------------------------------------------ Dr. GRPO's constant


def constant_times_micro_batch(loss, mask, mode, sequences, tokens, constant=None, world_size=1):
    """The mutant: each micro-batch's token sum over the constant, times its b rows."""
    scaled = aggregate_loss_across_microbatch(loss, mask, mode, constant) * loss.shape[0] * world_size
    scaled.backward()
    return scaled.detach()


@pytest.mark.parametrize("gas", [1, 2, 4])
def test_dr_grpos_constant_does_not_scale_with_the_micro_batch(make_model, tokenizer, monkeypatch, gas):
    """verl verl-project/verl#3741: `seq-mean-token-sum-norm` (Dr. GRPO) summed the sequence
    losses of a micro-batch and divided by the response horizon L only, instead of averaging over
    the sequences, so loss and gradient grew with the micro-batch size b. Dr. GRPO (Liu et al.
    2025, arXiv 2503.20783) divides by a constant: (1/C) Σ_i Σ_t ℓ_it with C = B · L for the whole
    step. The update is the same for b = 8, 4 and 2; halving C doubles it."""
    batch = make_rollout_batch()
    B, L = 8, 12  # rows, the longest response
    expected = expected_update(make_model(torch.float64), tokenizer, batch, "constant", constant=B * L)
    update = sgd_step(make_model(torch.float64), tokenizer, batch, gas, "constant", constant=B * L)
    assert relative_difference(update, expected) < EXACT
    halved = sgd_step(make_model(torch.float64), tokenizer, batch, gas, "constant", constant=B * L / 2)
    assert relative_difference(halved, [2 * u for u in update]) < EXACT
    monkeypatch.setattr(course.train_step, "calculate_loss_and_backward", constant_times_micro_batch)
    mutant = sgd_step(make_model(torch.float64), tokenizer, batch, gas, "constant", constant=B * L)
    assert relative_difference(mutant, expected) > MISSED
