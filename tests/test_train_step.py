"""grpo_train_step: the update is the full-batch gradient step, however the batch is micro-batched.

The exactness check of the train step: with SGD(lr=1) the update is −∇L exactly, where L is the GRPO objective of
the whole batch (naive.full_batch_loss: full log_softmax, loops, float64). For every loss variant and
every normalization, with ragged prompts and responses, gradient_accumulation_steps ∈ {1, 2, 3, 4, B}
must all give that update to 1e-10 (float64). SGD, not AdamW: Adam's per-coordinate normalization
would hide a gradient that is off by a constant factor. Beside it, the historical bug (each
micro-batch divided by its own token count, then by the number of steps) is shown to fail the check.

Rewards are float32 (as `compute_rollout_rewards` returns them), so std-normalized advantages carry float32 rounding. The exact checks
use Dr. GRPO's unnormalized advantages (exact in float32 for these rewards); std-normalized ones are
checked to 1e-6 against the naive reference and to 1e-10 between accumulation settings.
"""

import inspect

import pytest
import torch
from naive import (
    entropy,
    full_batch_loss,
    gradient,
    group_normalized_rewards,
    make_old_log_probs,
    make_rollout_batch,
    relative_difference,
    response_log_probs,
    reward_fn,
    tokenize,
)

from course import grpo_train_step

pytestmark = pytest.mark.usefixtures("single_thread")

METHODS = ["none", "noclip", "grpo", "gspo", "cispo"]
MODES = ["sequence", "token", "constant"]
CONSTANT = 40.0  # Dr. GRPO's C: e.g. B · a max response length
CLIPRANGE = 0.2


def _arguments(method, mode, old_log_probs, normalizer="none"):
    return {
        "advantage_normalizer": normalizer,
        "pg_method": method,
        "old_log_probs": None if method == "none" else old_log_probs,
        "cliprange": CLIPRANGE if method in ("grpo", "gspo", "cispo") else None,
        "loss_normalization": mode,
        "normalization_constant": CONSTANT if mode == "constant" else None,
    }


def train_step(model, tokenizer, batch, gas, max_grad_norm=None, **kwargs):
    """Run grpo_train_step with SGD(lr=1); return (update, loss, metadata)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    before = [p.detach().clone() for p in model.parameters()]
    loss, metadata = grpo_train_step(
        model, tokenizer, optimizer, gas, max_grad_norm, reward_fn, batch["prompts"],
        batch["responses"], batch["ground_truths"], batch["group_size"], **kwargs)
    update = [p.detach() - b for p, b in zip(model.parameters(), before)]
    return update, loss, metadata


def expected_update(model, tokenizer, batch, method, mode, old_log_probs, normalizer="none"):
    """−∇L of the whole batch, and L."""
    loss = full_batch_loss(model, tokenizer, batch, method, mode, old_log_probs, CLIPRANGE,
                           CONSTANT, normalizer=normalizer)
    return [-g for g in gradient(model, [loss])], loss.item()


class Unigram(torch.nn.Module):
    """A "language model" whose logits are the same θ ∈ R^V at every position: log π(y) = θ_y − lse θ."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.zeros(vocab_size, dtype=torch.float64))

    def forward(self, input_ids):
        return type("Output", (), {"logits": self.theta.expand(*input_ids.shape, -1)})()


@pytest.mark.parametrize("mode, scale, gas", [
    ("sequence", None, 1), ("sequence", None, 2), ("token", 3, 1), ("token", 3, 2),
    ("constant", 4, 1), ("constant", 4, 2)])
def test_hand_worked_update_of_a_unigram_model(tokenizer, mode, scale, gas):
    # one group, prompt "=", responses "1" (one token, id 8, reward 1) and "22" (two tokens, id 9,
    # reward 0); Dr. GRPO advantages +0.5 and −0.5. θ = 0, so π is uniform: u = 1/103 everywhere.
    # ∇θ log π(y) = e_y − u.  With SGD(lr=1) the update is −∇L:
    #   sequence  L = ½[−½ log π(1) + ½ · (2 log π(2)) / 2]  ->  −∇L = ¼ e_1 − ¼ e_2
    #   token     L = ⅓[−½ log π(1) + ½ · 2 log π(2)]       ->  −∇L = ⅓(½ e_1 − e_2 + ½ u)
    #   constant  the same with C = 4 instead of N = 3      ->  −∇L = ¼(½ e_1 − e_2 + ½ u)
    V = len(tokenizer)  # 103
    model = Unigram(V)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    grpo_train_step(model, tokenizer, optimizer, gas, None, reward_fn, ["=", "="], ["1", "22"],
                    ["1.0", "0.0"], 2, advantage_normalizer="none", loss_normalization=mode,
                    normalization_constant=4.0 if mode == "constant" else None)
    one, two = tokenizer.convert_tokens_to_ids(["1", "2"])  # 8, 9
    expected = torch.zeros(V, dtype=torch.float64)
    if mode == "sequence":
        expected[one], expected[two] = 0.25, -0.25
    else:
        expected += 0.5 / V
        expected[one] += 0.5
        expected[two] -= 1.0
        expected /= scale
    torch.testing.assert_close(model.theta.detach(), expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", METHODS)
def test_update_is_independent_of_micro_batching(make_model, tokenizer, method, mode):
    batch = make_rollout_batch()  # B = 8, two groups, response lengths 1..12 tokens
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    expected, expected_loss = expected_update(model, tokenizer, batch, method, mode, old)
    assert max(g.abs().max() for g in expected) > 1e-4  # the check is not vacuous
    for gas in (1, 2, 3, 4, len(batch["prompts"])):
        update, loss, metadata = train_step(make_model(torch.float64), tokenizer, batch, gas,
                                            **_arguments(method, mode, old))
        assert relative_difference(update, expected) < 1e-10, f"{gas=}"
        assert float(loss) == pytest.approx(expected_loss, rel=1e-6, abs=1e-7), f"{gas=}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", ["none", "grpo"])
def test_update_with_std_normalized_advantages(make_model, tokenizer, method, mode):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    expected, _ = expected_update(model, tokenizer, batch, method, mode, old, "std")
    arguments = _arguments(method, mode, old, "std")
    reference, _, _ = train_step(make_model(torch.float64), tokenizer, batch, 1, **arguments)
    assert relative_difference(reference, expected) < 1e-6  # float32 advantages
    for gas in (2, 3, 4, 8):
        update, _, _ = train_step(make_model(torch.float64), tokenizer, batch, gas, **arguments)
        assert relative_difference(update, reference) < 1e-10, f"{gas=}"


def test_per_micro_batch_token_count_fails_the_same_check(make_model, tokenizer):
    # The bug the check exists for: token mode, each micro-batch's masked sum divided by its OWN
    # token count and then by the number of accumulation steps. Ragged lengths make it wrong.
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    for method in ("none", "grpo"):
        expected, _ = expected_update(model, tokenizer, batch, method, "token", old)
        for gas in (2, 4, 8):
            rows = [r.tolist() for r in torch.arange(8).split(8 // gas)]
            buggy = gradient(model, [
                full_batch_loss(model, tokenizer, batch, method, "token", old, CLIPRANGE, rows=r,
                                per_microbatch_token_count=True, accumulation_steps=gas,
                                normalizer="none") for r in rows])
            # and the correct per-micro-batch version (divide by the step's N) passes it
            correct = gradient(model, [
                full_batch_loss(model, tokenizer, batch, method, "token", old, CLIPRANGE, rows=r,
                                normalizer="none") for r in rows])
            assert relative_difference([-g for g in correct], expected) < 1e-10
            assert relative_difference([-g for g in buggy], expected) > 0.05, f"{method=} {gas=}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", ["none", "grpo", "gspo"])
def test_zero_advantage_group_leaves_the_update_unchanged(make_model, tokenizer, method, mode):
    # a third group whose four rewards are equal: advantages exactly 0. Its rows add no gradient but
    # count in B (sequence) and N (token); gas=3 makes one micro-batch hold only that group.
    batch = make_rollout_batch(zero_advantage_group=True)  # B = 12
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    expected, _ = expected_update(model, tokenizer, batch, method, mode, old)
    for gas in (1, 3, 4, 12):
        update, _, _ = train_step(make_model(torch.float64), tokenizer, batch, gas,
                                  **_arguments(method, mode, old))
        assert relative_difference(update, expected) < 1e-10, f"{gas=}"


@pytest.mark.parametrize("mode", MODES)
def test_float32_update_is_independent_of_micro_batching(make_model, tokenizer, mode):
    batch = make_rollout_batch()
    old = make_old_log_probs(make_model(torch.float64), batch, tokenizer).float()
    reference, _, _ = train_step(make_model(torch.float32), tokenizer, batch, 1,
                                 **_arguments("grpo", mode, old))
    for gas in (2, 4, 8):
        update, _, _ = train_step(make_model(torch.float32), tokenizer, batch, gas,
                                  **_arguments("grpo", mode, old))
        assert relative_difference(update, reference) < 1e-6, f"{gas=}"


def test_metadata_matches_the_full_batch(make_model, tokenizer):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    tokens = tokenize(batch["prompts"], batch["responses"], tokenizer)
    mask = tokens["response_mask"].bool()
    with torch.no_grad():
        logits = model(tokens["input_ids"]).logits
        logp = torch.log_softmax(logits.double(), -1).gather(-1, tokens["labels"][..., None])[..., 0]
        ratio = torch.exp(logp - old)
    advantages = torch.tensor(group_normalized_rewards(batch["rewards"], 4, normalizer="none"))
    a = advantages[:, None].expand_as(ratio)
    clipped = ((a > 0) & (ratio > 1 + CLIPRANGE)) | ((a < 0) & (ratio < 1 - CLIPRANGE))
    expected_grad, _ = expected_update(model, tokenizer, batch, "grpo", "token", old)
    grad_norm = torch.sqrt(sum((g**2).sum() for g in expected_grad)).item()
    for gas in (1, 3, 8):
        _, _, meta = train_step(make_model(torch.float64), tokenizer, batch, gas,
                                **_arguments("grpo", "token", old))
        meta = {k: float(v) for k, v in meta.items()}
        assert meta["response_token_count"] == mask.sum().item() == 38
        assert meta["clip_count"] == clipped[mask].sum().item() > 0
        assert meta["clip_total"] == 38
        assert meta["clip_fraction"] == pytest.approx(clipped[mask].sum().item() / 38)
        assert meta["importance_ratio_mean"] == pytest.approx(ratio[mask].mean().item(), rel=1e-6)
        assert meta["token_entropy"] == pytest.approx(entropy(logits)[mask].mean().item(), rel=1e-6)
        assert meta["gradient_norm"] == pytest.approx(grad_norm, rel=1e-6)
        assert meta["reward_mean"] == pytest.approx(sum(batch["rewards"]) / 8)
        assert meta["optimizer_step"] == 1


def test_gradient_clipping_scales_the_update(make_model, tokenizer):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    expected, _ = expected_update(model, tokenizer, batch, "none", "sequence", None)
    norm = torch.sqrt(sum((g**2).sum() for g in expected)).item()
    for gas in (1, 4):
        update, _, meta = train_step(make_model(torch.float64), tokenizer, batch, gas,
                                     max_grad_norm=norm / 4, **_arguments("none", "sequence", None))
        assert float(meta["gradient_norm"]) == pytest.approx(norm, rel=1e-6)  # before clipping
        # torch clips by max_norm / (norm + 1e-6): off by ~1e-6 relative here
        assert relative_difference(update, [g / 4 for g in expected]) < 1e-5


@pytest.mark.parametrize("method, poison", [("noclip", float("nan")), ("grpo", -1e4)])
def test_non_finite_loss_or_gradient_aborts_before_the_step(make_model, tokenizer, method, poison):
    # noclip: a NaN old log-prob makes the loss NaN. grpo: old = -1e4 under a positive advantage
    # gives r = inf, which the clip hides from the loss (−1.2·A) but not from the gradient (inf·0).
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    tokens = tokenize(batch["prompts"], batch["responses"], tokenizer)
    position = tokens["response_mask"][0].nonzero()[0, 0]  # row 0: reward 1, advantage > 0
    old[0, position] = poison
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(RuntimeError):
        train_step(model, tokenizer, batch, 2, **_arguments(method, "token", old))
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))


@pytest.mark.parametrize("method", METHODS[1:])
def test_inf_and_nan_off_the_response_change_nothing(make_model, tokenizer, method):
    # A bad old, reference or sampler log-prob at a prompt or padding position (it was masked in
    # the loss only after exp before: grad nan, step aborted) leaves the update exactly as clean.
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    penalties = _penalties(model, batch, tokenizer, 0.5, "ratio_k1", True)
    mask = tokenize(batch["prompts"], batch["responses"], tokenizer)["response_mask"].bool()
    poisoned = {}
    for name, values in (("old", old), ("ref_log_probs", penalties["ref_log_probs"]),
                         ("sampler_log_probs", penalties["sampler_log_probs"])):
        values = values.clone()
        off = (~mask).nonzero().tolist()
        for number, (row, column) in enumerate(off):
            values[row, column] = (float("nan"), float("inf"), -float("inf"))[number % 3]
        values[:, mask.shape[1]:] = float("nan")  # past the tokenized batch too
        poisoned[name] = values
    clean, clean_loss, _ = train_step(make_model(torch.float64), tokenizer, batch, 2,
                                      **_arguments(method, "token", old), **penalties)
    update, loss, _ = train_step(make_model(torch.float64), tokenizer, batch, 2,
                                 **_arguments(method, "token", poisoned.pop("old")),
                                 **{**penalties, **poisoned})
    assert all(torch.equal(u, c) for u, c in zip(update, clean)) and torch.equal(loss, clean_loss)


@pytest.mark.parametrize("change, argument", [
    ({"responses": ["3"] * 7}, "repeated_prompts|rollout_responses|repeated_ground_truths"),
    ({"group_size": 3}, "group_size"),
    ({"gas": 0}, "gradient_accumulation_steps"),
    ({"loss_normalization": "mean"}, "loss_normalization"),
    ({"loss_normalization": "constant"}, "normalization_constant"),
    ({"loss_normalization": "constant", "normalization_constant": 0}, "normalization_constant"),
    ({"pg_method": "grpo", "cliprange": 0.2}, "old_log_probs"),
    ({"pg_method": "noclip", "old_log_probs": torch.zeros(8, 3)},
     "old_log_probs"),
    ({"pg_method": "ppo"}, "pg_method"),
])
def test_bad_inputs_raise_naming_the_argument(make_model, tokenizer, change, argument):
    batch = make_rollout_batch()
    batch.update({k: v for k, v in change.items() if k in batch})
    kwargs = {k: v for k, v in change.items() if k not in batch and k != "gas"}
    model = make_model(torch.float64)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=argument):
        train_step(model, tokenizer, batch, change.get("gas", 2), **kwargs)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))


# ---- a KL penalty and truncated importance sampling are part of the step -------------------------
TIS_CAP = 1.2  # low enough that some of the weights below are capped


def _penalties(model, batch, tokenizer, kl_beta, estimator, tis):
    """ref (and, with tis, sampler) log-probs: the model's own, perturbed differently from old's."""
    penalties = {"kl_beta": kl_beta, "kl_estimator": estimator}
    if kl_beta:
        penalties["ref_log_probs"] = make_old_log_probs(model, batch, tokenizer, seed=1, scale=0.5)
    if tis:
        penalties.update(sampler_log_probs=make_old_log_probs(model, batch, tokenizer, seed=2), tis_cap=TIS_CAP)
    return penalties


@pytest.mark.parametrize("method, mode, kl_beta, estimator, tis", [
    ("none", "sequence", 0.5, "k3", False), ("none", "token", 0.5, "k1", True), ("grpo", "token", 0.5, "ratio_k1", True),
    ("grpo", "constant", 0.0, "k3", True), ("cispo", "sequence", 0.5, "k2", True), ("gspo", "token", 0.5, "k3", False),
])
def test_kl_and_tis_update_is_independent_of_micro_batching(make_model, tokenizer, method, mode, kl_beta,
                                                            estimator, tis):
    # the zero-advantage group has a KL gradient: its rows must be scored, and counted
    batch = make_rollout_batch(zero_advantage_group=True)  # B = 12
    model = make_model(torch.float64)
    old = make_old_log_probs(model, batch, tokenizer)
    penalties = _penalties(model, batch, tokenizer, kl_beta, estimator, tis)
    naive_penalties = {k: v for k, v in penalties.items() if k != "kl_estimator"}
    loss = full_batch_loss(model, tokenizer, batch, method, mode, None if method == "none" else old,
                           CLIPRANGE, CONSTANT, normalizer="none", kl_estimator=estimator, **naive_penalties)
    expected = [-g for g in gradient(model, [loss])]
    without, _ = expected_update(model, tokenizer, batch, method, mode, old)
    assert relative_difference(without, expected) > 1e-3  # the penalties change the update
    for gas in (1, 2, 3, 4):
        update, step_loss, metadata = train_step(make_model(torch.float64), tokenizer, batch, gas,
                                                 **_arguments(method, mode, old), **penalties)
        assert relative_difference(update, expected) < 1e-10, f"{gas=}"
        assert float(step_loss) == pytest.approx(loss.item(), rel=1e-6, abs=1e-7), f"{gas=}"
        assert ("kl_mean" in metadata) == (kl_beta > 0) and ("tis_weight_mean" in metadata) == tis


def test_tis_weights_are_capped_and_reported(make_model, tokenizer):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    tokens = tokenize(batch["prompts"], batch["responses"], tokenizer)
    mask = tokens["response_mask"].bool()
    with torch.no_grad():
        logp = torch.log_softmax(model(tokens["input_ids"]).logits, -1).gather(-1, tokens["labels"][..., None])[..., 0]
    sampler = make_old_log_probs(model, batch, tokenizer, seed=2)
    weights = torch.exp(logp - sampler).clamp(max=TIS_CAP)[mask]
    assert (weights == TIS_CAP).any() and (weights < 1).any()  # both sides of the cap occur
    _, _, metadata = train_step(make_model(torch.float64), tokenizer, batch, 3, advantage_normalizer="none",
                                sampler_log_probs=sampler, tis_cap=TIS_CAP)
    assert float(metadata["tis_weight_mean"]) == pytest.approx(weights.mean().item(), rel=1e-6)


def test_a_reference_model_equals_its_log_probs(make_model, tokenizer):
    batch = make_rollout_batch()
    reference = make_model(torch.float64, seed=1)
    tokens = tokenize(batch["prompts"], batch["responses"], tokenizer)
    with torch.no_grad():
        ref = response_log_probs(reference, tokens["input_ids"], tokens["labels"])
    arguments = {"advantage_normalizer": "none", "kl_beta": 0.3, "kl_estimator": "k3"}
    given, _, given_meta = train_step(make_model(torch.float64), tokenizer, batch, 2, ref_log_probs=ref, **arguments)
    scored, _, scored_meta = train_step(make_model(torch.float64), tokenizer, batch, 3, ref_model=reference,
                                        **arguments)
    assert relative_difference(scored, given) < 1e-10
    assert float(given_meta["kl_mean"]) > 0
    assert float(scored_meta["kl_mean"]) == pytest.approx(float(given_meta["kl_mean"]), rel=1e-6)


@pytest.mark.parametrize("change, argument", [
    ({"kl_beta": 0.1}, "ref_log_probs and ref_model"),
    ({"kl_beta": -0.1, "ref_log_probs": torch.zeros(8, 40)}, "kl_beta"),
    ({"kl_beta": 0.1, "ref_log_probs": torch.zeros(8, 40), "kl_estimator": 2}, "kl_estimator"),
    ({"kl_beta": 0.1, "ref_log_probs": torch.zeros(8, 3)}, "ref_log_probs"),
    ({"sampler_log_probs": torch.zeros(7, 40)}, "sampler_log_probs"),
    ({"sampler_log_probs": torch.zeros(8, 40), "tis_cap": 0}, "tis_cap"),
])
def test_bad_penalty_inputs_raise_naming_the_argument(make_model, tokenizer, change, argument):
    batch = make_rollout_batch()
    model = make_model(torch.float64)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=argument):
        train_step(model, tokenizer, batch, 2, **change)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_the_train_step_reads_on_one_screen():
    # the pipeline stays readable: its steps live in named helpers (course/train_step.py)
    assert len(inspect.getsource(grpo_train_step).splitlines()) <= 80
