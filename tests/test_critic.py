"""course.critic: GAE against a naive loop and hand-worked numbers, masking, the clipped value
loss, the PPO step's exactness under accumulation, the command line, and a 2-step run."""

import json

import pytest
import torch
from command_lines import refused_before_torch

from course.aggregation import masked_mean
from course.critic import ppo_step
from course.critic.__main__ import main
from course.critic.config import CriticConfig, check
from course.critic.gae import (
    compute_gae_advantage_return,
    masked_variance,
    masked_whiten,
    outcome_token_rewards,
)
from course.critic.ppo_step import ppo_backward
from course.critic.run import run
from course.critic.value import clipped_value_loss, log_probs_and_values, value_head
from course.loop.train_config import ConfigError, TrainConfig
from course.losses import clipped_surrogate
from course.paths import CHECKPOINTS
from course.tokenization import tokenize_prompt_and_output

# Right-padded (the last row) and with a hole (the second row's third position is off the mask).
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 1, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]])


def naive_gae(rewards, values, mask, gamma, lam):
    """Per row, the masked positions as an episode: A_t = Σ_l (γλ)^l δ_{t+l} summed term by term,
    δ_k = r_k + γ V_{k+1} − V_k with V past the last step 0 (arXiv 1506.02438, eq. 16)."""
    advantages = [[0.0] * len(row) for row in mask]
    for i, row in enumerate(mask):
        steps = [t for t, m in enumerate(row) if m]
        r = [float(rewards[i][t]) for t in steps]
        v = [float(values[i][t]) for t in steps] + [0.0]
        deltas = [r[k] + gamma * v[k + 1] - v[k] for k in range(len(steps))]
        for k, t in enumerate(steps):
            advantages[i][t] = sum((gamma * lam) ** j * deltas[k + j]
                                   for j in range(len(steps) - k))
    return torch.tensor(advantages, dtype=torch.float64)


def random_inputs(seed=0):
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randn(MASK.shape, generator=generator, dtype=torch.float64)
    values = torch.randn(MASK.shape, generator=generator, dtype=torch.float64)
    return rewards, values


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (1.0, 0.95), (0.9, 0.5), (0.99, 0.0)])
def test_gae_matches_a_naive_loop(gamma, lam):
    rewards, values = random_inputs()
    advantages, returns = compute_gae_advantage_return(rewards, values, MASK, gamma, lam)
    expected = naive_gae(rewards.tolist(), values.tolist(), MASK.tolist(), gamma, lam)
    torch.testing.assert_close(advantages, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(returns, torch.where(MASK.bool(), expected + values, 0))


def test_gae_hand_worked_on_three_tokens():
    """r = 1 on the last of 3 tokens, V = (0.2, 0.5, 0.9)."""
    rewards = outcome_token_rewards(torch.tensor([1.0]), torch.tensor([[1, 1, 1]]))
    assert rewards.tolist() == [[0.0, 0.0, 1.0]]
    values = torch.tensor([[0.2, 0.5, 0.9]], dtype=torch.float64)
    rewards = rewards.double()
    # γ = λ = 1: A_t = r − V_t, and the return is r at every token
    advantages, returns = compute_gae_advantage_return(rewards, values, torch.ones(1, 3), 1, 1)
    torch.testing.assert_close(advantages, torch.tensor([[0.8, 0.5, 0.1]], dtype=torch.float64))
    torch.testing.assert_close(returns, torch.ones(1, 3, dtype=torch.float64))
    # λ = 0: the one-step δ_t = r_t + V_{t+1} − V_t = (0.3, 0.4, 0.1)
    advantages, _ = compute_gae_advantage_return(rewards, values, torch.ones(1, 3), 1, 0)
    torch.testing.assert_close(advantages, torch.tensor([[0.3, 0.4, 0.1]], dtype=torch.float64))
    # λ = 0.5: A_3 = 0.1, A_2 = 0.4 + 0.5·0.1 = 0.45, A_1 = 0.3 + 0.5·0.45 = 0.525
    advantages, _ = compute_gae_advantage_return(rewards, values, torch.ones(1, 3), 1, 0.5)
    torch.testing.assert_close(advantages,
                               torch.tensor([[0.525, 0.45, 0.1]], dtype=torch.float64))


def test_padding_values_change_nothing():
    rewards, values = random_inputs()
    advantages, returns = compute_gae_advantage_return(rewards, values, MASK, 1.0, 0.9)
    off = ~MASK.bool()
    for fill in (torch.nan, torch.inf, 1e30):
        poisoned = [torch.where(off, fill, x) for x in (rewards, values)]
        again = compute_gae_advantage_return(*poisoned, MASK, 1.0, 0.9)
        torch.testing.assert_close(again[0], advantages, atol=0, rtol=0)
        torch.testing.assert_close(again[1], returns, atol=0, rtol=0)
    assert (advantages[off] == 0).all() and (returns[off] == 0).all()
    # the attack the select stops: masking by multiplication lets 0 · nan through
    assert (torch.where(off, torch.nan, values) * MASK).isnan().any()


def test_the_outcome_reward_lands_on_the_last_response_token_with_the_kl_penalty():
    kl = torch.full(MASK.shape, 0.5)
    rewards = outcome_token_rewards(torch.tensor([1.0, 2.0, 3.0, 4.0]), MASK, kl, kl_coef=0.1)
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, -0.05, -0.05, -0.05, 0.95],
                                                      [-0.05, -0.05, 0, 1.95, 0],
                                                      [-0.05, 2.95, 0, 0, 0], [0, 0, 0, 0, 0]]))
    with pytest.raises(ValueError, match="rewards"):
        outcome_token_rewards(torch.ones(3), MASK)


def test_whitening_and_variance_count_only_the_masked_tokens():
    values = torch.tensor([[1.0, 2.0, 3.0, 99.0], [5.0, 1e9, 0, 0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    # tokens 1, 2, 3, 5: mean 2.75, unbiased variance 8.75 / 3, population 8.75 / 4
    expected = (torch.tensor([1.0, 2, 3, 5], dtype=torch.float64) - 2.75) / (8.75 / 3) ** 0.5
    whitened = masked_whiten(values, mask, eps=0.0)
    torch.testing.assert_close(whitened[mask.bool()], expected)
    assert (whitened[~mask.bool()] == 0).all()
    assert masked_variance(values, mask) == pytest.approx(8.75 / 4)


def test_the_value_loss_hand_worked_and_clipped_only_outside_the_band():
    old = torch.tensor([[0.5, 0.5, 0.5, 0.5]], dtype=torch.float64)
    returns = torch.tensor([[1.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.6, 0.9, 0.1, 7.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0]])
    loss, clipped = clipped_value_loss(values, old, returns, mask, value_clip=0.2)
    # token 1: V inside 0.5 ± 0.2, ½(0.6 − 1)² = 0.08. Token 2: V = 0.9 is clipped to 0.7, the
    # clipped error ½(0.7 − 1)² = 0.045 is smaller, the max keeps ½(0.9 − 1)² = 0.005 (moving
    # toward R is not held back). Token 3: V = 0.1 is clipped to 0.3, ½·0.3² = 0.045 beats
    # ½·0.1² = 0.005: the clip holds V back. Token 4 is padding.
    torch.testing.assert_close(loss, torch.tensor([[0.08, 0.045, 0.045, 0.0]],
                                                  dtype=torch.float64))
    assert clipped.tolist() == [[False, True, True, False]]
    # inside ±ε_v the loss is the plain squared error, whatever ε_v
    inside = torch.tensor([[0.55, 0.45, 0.5, 0.5]], dtype=torch.float64)
    for clip in (0.1, 0.2, 5.0):
        loss, clipped = clipped_value_loss(inside, old, returns, mask, clip)
        torch.testing.assert_close(loss, torch.where(mask.bool(), 0.5 * (inside - returns) ** 2, 0))
        assert not clipped.any()
    with pytest.raises(ValueError, match="value_clip"):
        clipped_value_loss(values, old, returns, mask, 0.0)


def test_the_value_loss_keeps_padding_out_of_the_gradient():
    values = torch.tensor([[0.3, torch.nan]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[0.2, torch.inf]], dtype=torch.float64)
    loss, _ = clipped_value_loss(values, old, torch.tensor([[1.0, torch.nan]]),
                                 torch.tensor([[1, 0]]), 0.2)
    loss.sum().backward()
    assert torch.isfinite(values.grad).all() and values.grad[0, 1] == 0


PROMPTS = [f"User: {a}+{b}\nAssistant: <think>" for a, b in
           [(12, 34), (56, 78), (90, 11), (23, 45), (67, 89), (10, 99), (42, 42), (31, 13)]]
RESPONSES = ["</think> <answer>64</answer><eos>", "a<eos>", "</think> <answer>1</answer>",
             "xyz 123 456 789 abc defgh", "</think> <answer>65</answer><eos>", "99",
             "</think> <answer>48</answer><eos>", "4"]


def ppo_batch(model, head, tokenizer):
    """A float64 PPO batch on rows of 2 to 24 response tokens, with V_old and log π_old a little
    off the current ones, so that both clips act on some tokens."""
    tokens = tokenize_prompt_and_output(PROMPTS, RESPONSES, tokenizer)
    mask = tokens["response_mask"]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        log_probs, values = log_probs_and_values(model, head, tokens["input_ids"],
                                                 tokens["labels"])
    noise = torch.randn(mask.shape, generator=generator, dtype=torch.float64)
    rewards = outcome_token_rewards(torch.tensor([1.0, 0, 0, 0, 1, 0, 1, 0]), mask).double()
    advantages, returns = compute_gae_advantage_return(rewards, values, mask, 1.0, 0.9)
    return {**tokens, "old_log_probs": log_probs + 0.3 * noise, "old_values": values + 0.3 * noise,
            "advantages": masked_whiten(advantages, mask), "returns": returns}


def gradients(make_model, tokenizer, k):
    model = make_model()
    head = value_head(model)
    torch.nn.init.normal_(head.weight, std=0.1, generator=torch.Generator().manual_seed(1))
    batch = ppo_batch(model, head, tokenizer)
    record = ppo_backward(model, head, batch, k, cliprange=0.2, value_clip=0.1, vf_coef=0.5)
    named = [*model.named_parameters(), *(("head." + n, p) for n, p in head.named_parameters())]
    return record, {name: p.grad.clone() for name, p in named}


def per_micro_batch_mean(per_token_loss, response_mask, loss_normalization, step_sequence_count,
                         step_token_count, normalization_constant=None, world_size=1):
    """The bug: each micro-batch's own token mean, times its share b/B of the rows."""
    share = per_token_loss.shape[0] / step_sequence_count
    loss = masked_mean(per_token_loss, response_mask) * share
    loss.backward()
    return loss.detach()


def test_the_ppo_gradient_does_not_depend_on_the_accumulation_split(make_model, tokenizer,
                                                                     monkeypatch):
    whole_record, whole = gradients(make_model, tokenizer, 1)
    assert 0 < whole_record["clip_fraction"] < 1 and 0 < whole_record["value_clip_fraction"] < 1
    for k in (2, 4):
        record, split = gradients(make_model, tokenizer, k)
        assert record == pytest.approx(whole_record, abs=1e-10)
        for name, value in whole.items():
            torch.testing.assert_close(split[name], value, atol=1e-10, rtol=0)
    monkeypatch.setattr(ppo_step, "calculate_loss_and_backward", per_micro_batch_mean)
    _, buggy_whole = gradients(make_model, tokenizer, 1)
    _, buggy_split = gradients(make_model, tokenizer, 4)
    assert all(torch.allclose(buggy_whole[n], whole[n], atol=1e-10, rtol=0) for n in whole)
    assert max(float((buggy_split[n] - whole[n]).abs().max()) for n in whole) > 1e-4


def test_token_level_advantages_are_ppo_clip_token_by_token(make_model, tokenizer):
    """The policy term of the step is clipped_surrogate on (r_t, A_t), computed here directly."""
    model = make_model()
    head = value_head(model)
    batch = ppo_batch(model, head, tokenizer)
    mask = batch["response_mask"].bool()
    with torch.no_grad():
        log_probs, _ = log_probs_and_values(model, head, batch["input_ids"], batch["labels"])
    ratio = torch.exp(torch.where(mask, log_probs - batch["old_log_probs"], 0))
    _, _, expected = clipped_surrogate(ratio, batch["advantages"], 0.2, 0.2)
    record = ppo_backward(model, head, batch, 1, 0.2, 0.1, vf_coef=0.0)
    assert record["policy_loss"] == pytest.approx(float(expected[mask].mean()), abs=1e-12)


def test_the_value_head_reads_the_last_hidden_state_of_the_same_forward(make_model, tokenizer):
    model = make_model()
    head = value_head(model)
    assert not head.weight.any() and not head.bias.any()  # V = 0 at the start
    torch.nn.init.normal_(head.weight, generator=torch.Generator().manual_seed(0))
    tokens = tokenize_prompt_and_output(PROMPTS[:2], RESPONSES[:2], tokenizer)
    log_probs, values = log_probs_and_values(model, head, tokens["input_ids"], tokens["labels"])
    hidden = model.model(tokens["input_ids"]).last_hidden_state
    torch.testing.assert_close(values, head(hidden).squeeze(-1))
    logits = model(tokens["input_ids"]).logits.log_softmax(-1)
    torch.testing.assert_close(log_probs, logits.gather(-1, tokens["labels"][..., None])[..., 0])


@pytest.mark.parametrize("critic", [CriticConfig(), CriticConfig(kl_coef=0.05, lam=1.0)])
def test_a_two_step_run_completes(tmp_path, single_thread, critic):
    config = TrainConfig(steps=2, prompts_per_step=2, group_size=2, eval_problems=4,
                         eval_samples=1, eval_every=1)
    summary = run(config, critic, tmp_path, progress=False)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["examples"]) for r in records] == [(1, 4), (2, 8)]
    assert all(r["advantage_var_none"] >= 0 and r["value_loss"] >= 0 for r in records)
    assert records[0]["value_mean"] == 0  # the zero head before its first step
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (summary["method"], summary["optimizer_steps"], summary["examples"]) == ("ppo", 2, 8)
    assert (tmp_path / "policy.pt").is_file() and (tmp_path / "value_head.pt").is_file()


@pytest.mark.parametrize("flags, flag", [
    ([], "--out"),
    (["--lam", "1.5"], "--lam"),
    (["--gamma", "-0.1"], "--gamma"),
    (["--value-clip", "0"], "--value-clip"),
    (["--vf-coef", "x"], "--vf-coef"),
    (["--seed", "-1"], "--seed"),
    (["--kl-beta", "0.1"], "--kl-beta"),
    (["--gradient-accumulation-steps", "65"], "--gradient-accumulation-steps"),
])
def test_the_command_line_refuses_a_bad_flag_by_name(tmp_path, capsys, flags, flag):
    out = [] if flag == "--out" else ["--out", str(tmp_path / "run")]
    with pytest.raises(SystemExit) as exit_info:
        main([*flags, *out])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert flag in error and "Traceback" not in error and len(error.strip().splitlines()) == 1


def test_a_bad_flag_is_refused_before_torch_loads():
    torch_loaded, error = refused_before_torch("course.critic.__main__", ['--lam', '2', '--out', 'unused'])
    assert not torch_loaded and "--lam" in error


def test_a_grpo_only_setting_is_refused_and_a_bad_critic_setting_named():
    check(TrainConfig(), CriticConfig())
    with pytest.raises(ConfigError, match="kl_beta"):
        check(TrainConfig(kl_beta=0.1), CriticConfig())
    with pytest.raises(ConfigError, match="lam"):
        check(TrainConfig(), CriticConfig(lam=-1.0))


def test_the_recorded_runs_hold_what_the_notebook_reads():
    """course/checkpoints/critic_runs.json (benchmarks/bench_critic.py): three seeds of each
    method on the same evaluation steps, one variance per step, and memory that is 16 bytes per
    trained parameter and 4 per frozen one."""
    recorded = json.loads((CHECKPOINTS / "critic_runs.json").read_text())
    seeds = [str(seed) for seed in recorded["seeds"]]
    assert seeds == ["0", "1", "2"]
    steps = recorded["config"]["steps"]
    for method in ("ppo", "grpo"):
        runs = recorded["curves"][method]
        assert list(runs) == seeds and list(recorded["seconds"][method]) == seeds
        assert all([p[0] for p in run] == list(range(0, steps + 1, 10)) for run in runs.values())
        assert all(0 <= a <= 1 for run in runs.values() for p in run for a in p[1:])
    assert all(len(values) == steps for run in recorded["advantage_variance"].values()
               for values in run.values())
    counts, memory = recorded["parameters"], recorded["memory_bytes"]
    assert memory["GRPO (policy)"] == 16 * counts["policy"]
    assert memory["PPO, separate critic"] == 16 * (counts["policy"] + counts["separate critic"])
    assert memory["PPO, separate critic + reference (InstructGPT)"] == (
        memory["PPO, separate critic"] + 4 * counts["policy"])


def test_bad_gae_inputs_are_refused_by_name():
    rewards, values = random_inputs()
    for args, name in [((rewards, values, MASK, 1.5, 1.0), "gamma"),
                       ((rewards, values[:, :3], MASK, 1.0, 1.0), "values"),
                       ((rewards, values, MASK[0], 1.0, 1.0), "response_mask")]:
        with pytest.raises(ValueError, match=name):
            compute_gae_advantage_return(*args)
    with pytest.raises(ValueError, match="at least 2 response tokens"):
        masked_whiten(values, torch.tensor([[1, 0, 0, 0, 0]] + [[0] * 5] * 3))
