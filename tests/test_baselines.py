"""course.baselines: the SFT step's loss and its exactness under accumulation, expert iteration's
filter, the command line's refusals, and a 2-step run of each method."""

import json
import math

import pytest
import torch
from command_lines import refused_before_torch

from course.aggregation import masked_mean
from course.baselines import sft
from course.baselines.__main__ import main
from course.baselines.budget import METHODS, budget, check
from course.baselines.expert_iteration import expert_samples, keep_correct
from course.baselines.run import run
from course.baselines.sft import demonstrations, sft_train_step
from course.loop.models import load_model_and_tokenizer
from course.loop.tasks import ADDITION, Problem, r1_zero_reward_fn
from course.loop.train_config import WARM_START, ConfigError, TrainConfig

# Eight rows whose responses are 2 to 24 tokens long: every split below gives its micro-batches
# unequal token counts, where a per-micro-batch mean and the step's mean differ.
PROMPTS = [f"User: {a}+{b}\nAssistant: <think>" for a, b in
           [(12, 34), (56, 78), (90, 11), (23, 45), (67, 89), (10, 99), (42, 42), (31, 13)]]
RESPONSES = ["</think> <answer>64</answer><eos>", "a<eos>", "</think> <answer>1</answer>",
             "xyz 123 456 789 abc defgh", "</think> <answer>65</answer><eos>", "99",
             "</think> <answer>48</answer><eos>", "4"]


def naive_sft_loss(model, tokenizer, prompts, responses) -> torch.Tensor:
    """Σ over response tokens of −log softmax(logits)[next token] / their count: one sequence at a
    time, the response's ids found by encoding it alone, torch's cross_entropy."""
    total, count = 0.0, 0
    for prompt, response in zip(prompts, responses):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        response_ids = tokenizer.encode(response, add_special_tokens=False)
        ids = torch.tensor([prompt_ids + response_ids])
        logits = model(ids[:, :-1]).logits[0]                        # (L-1, V)
        predicts = logits[len(prompt_ids) - 1:]  # (|response|, V): the positions before its tokens
        total = total + torch.nn.functional.cross_entropy(predicts, torch.tensor(response_ids),
                                                          reduction="sum")
        count += len(response_ids)
    return total / count


def step(model, tokenizer, k, lr=1.0):
    """One SFT step with plain SGD (its update is −lr · gradient: nothing hides a wrong scale)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    metadata = sft_train_step(model, tokenizer, optimizer, PROMPTS, RESPONSES, k)
    return metadata, {name: p.detach().clone() for name, p in model.named_parameters()}


def test_the_sft_loss_is_the_masked_cross_entropy_of_the_response_tokens(make_model, tokenizer):
    with torch.no_grad():
        expected = naive_sft_loss(make_model(), tokenizer, PROMPTS, RESPONSES)
    for k in (1, 3):
        metadata, _ = step(make_model(), tokenizer, k, lr=0.0)
        assert metadata["loss"] == pytest.approx(expected.item(), abs=1e-12)
    n_tokens = sum(len(tokenizer.encode(r, add_special_tokens=False)) for r in RESPONSES)
    assert metadata["response_tokens"] == n_tokens


def test_a_uniform_policy_costs_log_v_per_token(make_model, tokenizer):
    """Hand-worked: with a zero output head every logit is 0, π is uniform over V tokens, and every
    response token costs log V nats."""
    model = make_model()
    torch.nn.init.zeros_(model.lm_head.weight)
    metadata, _ = step(model, tokenizer, 2, lr=0.0)
    assert metadata["loss"] == pytest.approx(math.log(len(tokenizer)), abs=1e-12)


def per_micro_batch_mean(per_token_loss, response_mask, loss_normalization, step_sequence_count,
                         step_token_count, normalization_constant=None, world_size=1):
    """The bug: each micro-batch's own token mean, times its share b/B of the rows."""
    share = per_token_loss.shape[0] / step_sequence_count
    loss = masked_mean(per_token_loss, response_mask) * share
    loss.backward()
    return loss.detach()


def test_the_update_does_not_depend_on_the_accumulation_split(make_model, tokenizer, monkeypatch):
    whole_metadata, whole = step(make_model(), tokenizer, 1)
    for k in (2, 4):
        metadata, split = step(make_model(), tokenizer, k)
        assert metadata["loss"] == pytest.approx(whole_metadata["loss"], abs=1e-12)
        assert metadata["gradient_norm"] == pytest.approx(whole_metadata["gradient_norm"],
                                                          abs=1e-10)
        for name, value in whole.items():
            torch.testing.assert_close(split[name], value, atol=1e-10, rtol=0)
    # the planted bug agrees on one micro-batch and not on four of unequal token counts
    monkeypatch.setattr(sft, "calculate_loss_and_backward", per_micro_batch_mean)
    _, buggy_whole = step(make_model(), tokenizer, 1)
    _, buggy_split = step(make_model(), tokenizer, 4)
    assert all(torch.allclose(buggy_whole[n], whole[n], atol=1e-10, rtol=0) for n in whole)
    assert max(float((buggy_split[n] - whole[n]).abs().max()) for n in whole) > 1e-4


def test_bad_sft_inputs_are_refused_by_name(make_model, tokenizer):
    optimizer = torch.optim.SGD(make_model().parameters(), lr=0.1)
    for args, name in [((PROMPTS, RESPONSES[:3], 1), "prompts"), (([], [], 1), "prompts"),
                       ((PROMPTS, RESPONSES, 9), "gradient_accumulation_steps"),
                       ((PROMPTS, RESPONSES, 0), "gradient_accumulation_steps")]:
        with pytest.raises(ValueError, match=name):
            sft_train_step(make_model(), tokenizer, optimizer, *args)


def test_demonstrations_earn_the_full_reward():
    problems = [Problem(37, 48), Problem(50, 50)]
    prompts, responses = demonstrations(problems, "<eos>")
    assert responses == ["</think> <answer>58</answer><eos>", "</think> <answer>001</answer><eos>"]
    assert prompts[0] == "User: 37+48\nAssistant: <think>"
    assert [r1_zero_reward_fn(r, p.answer)["reward"] for r, p in zip(responses, problems)] == [1, 1]


def test_expert_iteration_keeps_exactly_the_correct_samples():
    rewards = {"right": 1.0, "wrong": 0.0, "half": 0.5, "right too": 1.0}
    prompts = ["p0", "p1", "p2", "p3", "p4"]
    responses = ["right", "wrong", "half", "right too", "wrong"]
    kept = keep_correct(prompts, responses, ["t"] * 5, lambda r, t: {"reward": rewards[r]})
    assert kept == (["p0", "p3"], ["right", "right too"])
    # r1-zero: a well-formatted wrong answer (format reward 1) is not kept, nor the right digits
    # outside the format
    responses = ["</think> <answer>58</answer><eos>", "</think> <answer>57</answer><eos>", "58"]
    kept = keep_correct(["a", "b", "c"], responses, ["58"] * 3, r1_zero_reward_fn)
    assert kept == (["a"], responses[:1])
    with pytest.raises(ValueError, match="ground_truths"):
        keep_correct(["a"], ["b"], [], r1_zero_reward_fn)


def test_expert_samples_are_the_policys_correct_rollouts(single_thread):
    policy, tokenizer = load_model_and_tokenizer(WARM_START)
    problems = list(ADDITION.problems("train"))[:6]
    prompts, responses, rollouts = expert_samples(policy, tokenizer, problems, 4, 0, 1, 16, 1.0)
    correct = [(p, r) for p, r, t in zip(rollouts.repeated_prompts, rollouts.responses,
                                         rollouts.repeated_ground_truths)
               if r1_zero_reward_fn(r, t)["reward"] == 1]
    assert 0 < len(correct) < len(rollouts) == 24  # the warm start is sometimes right
    assert list(zip(prompts, responses)) == correct


def small(**overrides) -> TrainConfig:
    return TrainConfig(**{**dict(steps=2, prompts_per_step=2, group_size=2, eval_problems=4,
                                 eval_samples=1, eval_every=1), **overrides})


def test_the_three_methods_spend_the_same_budget():
    config = small(steps=5, updates_per_rollout=2)
    assert {method: budget(method, config) for method in METHODS} == {
        method: {"optimizer_steps": 10, "examples": 20} for method in METHODS}


@pytest.mark.parametrize("method", METHODS)
def test_a_two_step_run_of_each_method_completes(tmp_path, method, single_thread):
    summary = run(method, small(), tmp_path, progress=False)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["examples"]) for r in records] == [(1, 4), (2, 8)]
    assert records[1]["train_seconds"] >= records[0]["train_seconds"] > 0
    assert "heldout_accuracy_sampled" in records[0] and "heldout_accuracy_sampled" in records[1]
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == summary
    assert (summary["method"], summary["optimizer_steps"], summary["examples"]) == (method, 2, 8)
    assert 0 <= summary["accuracy_after"] <= 1 and (tmp_path / "policy.pt").is_file()


@pytest.mark.parametrize("flags, flag", [
    (["--method", "ppo"], "--method"),
    ([], "--method"),
    (["--method", "sft", "--seed", "-1"], "--seed"),
    (["--method", "sft", "--steps", "two"], "--steps"),
    (["--method", "grpo", "--lr", "0"], "--lr"),
    (["--method", "sft", "--gradient-accumulation-steps", "65"], "--gradient-accumulation-steps"),
    (["--method", "expert_iteration", "--kl-beta", "0.1"], "--kl-beta"),
    (["--method", "sft", "--checkpoint", "/nonexistent"], "--checkpoint"),
])
def test_the_command_line_refuses_a_bad_flag_by_name(tmp_path, capsys, flags, flag):
    with pytest.raises(SystemExit) as exit_info:
        main([*flags, "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert flag in error and "Traceback" not in error and len(error.strip().splitlines()) == 1


def test_a_bad_flag_is_refused_before_torch_loads():
    torch_loaded, error = refused_before_torch("course.baselines.__main__", ['--method', 'sft', '--steps', '-1', '--out', 'unused'])
    assert not torch_loaded and "--steps" in error


def test_the_command_line_refuses_an_out_that_holds_a_run(tmp_path, capsys):
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(SystemExit):
        main(["--method", "sft", "--out", str(tmp_path)])
    assert "--out" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit):
        main(["--method", "sft", "--out", str(tmp_path / "file")])
    assert "--out" in capsys.readouterr().err


def test_a_grpo_only_setting_is_refused_for_the_baselines():
    check("grpo", TrainConfig(kl_beta=0.1))
    with pytest.raises(ConfigError, match="kl_beta"):
        check("sft", TrainConfig(kl_beta=0.1))
    with pytest.raises(ConfigError, match="method"):
        check("ppo", TrainConfig())
