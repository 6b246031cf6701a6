"""Rollouts: left-padded batched sampling scores like one sequence at a time, row-seeded sampling."""

import pytest
import torch

from course.loop.models import build_tiny_model_and_tokenizer
from course.loop.rollout import (
    RowSeededGumbelSampler,
    evaluate,
    generate,
    row_seed,
    sample_groups,
    score_tokens,
    tokenize_rollouts,
)
from course.loop.tasks import Problem, format_prompt, make_problems

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def model_and_tokenizer():
    # a random model samples long, varied responses: a harder test of alignment than a trained one
    model, tokenizer = build_tiny_model_and_tokenizer(seed=0)
    return model.eval(), tokenizer


# operands of 1 and 2 digits make prompts of different lengths, so the batch needs padding
PROBLEMS = [Problem(3, 4), Problem(37, 48), Problem(5, 61), Problem(99, 99)]


def one_at_a_time_log_probs(model, tokenizer, prompt, response_ids):
    """log π of each response token, scoring prompt + response alone: no padding, no mask."""
    ids = tokenizer.encode(prompt, add_special_tokens=False) + response_ids
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].double()              # (L-1, V)
    log_probs = logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    return log_probs[-len(response_ids):]


def test_batched_left_padded_sampling_matches_one_at_a_time_scoring(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompts = [format_prompt(p) for p in PROBLEMS]
    lengths = {len(tokenizer.encode(p, add_special_tokens=False)) for p in prompts}
    assert len(lengths) > 1                                                      # really padded
    generation = generate(model, tokenizer, prompts, seeds=[11, 12, 13, 14], max_new_tokens=12)
    for prompt, ids, sampled in zip(prompts, generation.response_ids, generation.sampler_log_probs):
        alone = one_at_a_time_log_probs(model, tokenizer, prompt, ids)
        torch.testing.assert_close(sampled.double(), alone, atol=1e-5, rtol=0)


def test_the_check_can_fail_without_the_attention_mask(model_and_tokenizer):
    # The same left-padded batch scored without its attention mask attends to pad tokens and
    # counts positions from the pad: the log-probs move far more than the tolerance above.
    model, tokenizer = model_and_tokenizer
    tokenizer.padding_side = "left"
    batch = tokenizer([format_prompt(p) for p in PROBLEMS], padding=True, add_special_tokens=False,
                      return_tensors="pt")
    tokenizer.padding_side = "right"
    with torch.no_grad():
        masked = model(**batch).logits[:, -1].log_softmax(-1)
        unmasked = model(batch["input_ids"]).logits[:, -1].log_softmax(-1)
    shortest = batch["attention_mask"].sum(dim=1).argmin()
    assert (masked[shortest] - unmasked[shortest]).abs().max() > 1e-3


def test_trainer_scores_align_with_sampler_scores(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    rollouts = sample_groups(model, tokenizer, PROBLEMS, group_size=3, seed=0, step=1, max_new_tokens=12)
    tokens = tokenize_rollouts(tokenizer, rollouts)
    trainer = score_tokens(model, tokens)
    mask = tokens["response_mask"].bool()
    assert trainer.shape == mask.shape == tokens["sampler_log_probs"].shape
    assert mask.sum(dim=1).tolist() == [len(x) for x in rollouts.sampler_log_probs]
    # same model, same precision: the re-scored old log-probs are the sampler's, position by position
    torch.testing.assert_close(tokens["sampler_log_probs"][mask], trainer[mask], atol=1e-5, rtol=0)
    assert (tokens["sampler_log_probs"][~mask] == 0).all()
    # a response that does not re-tokenize to what was sampled is refused, not silently misaligned
    rollouts.responses[0] += "7"
    with pytest.raises(ValueError, match="response lengths"):
        tokenize_rollouts(tokenizer, rollouts)


def test_responses_stop_at_eos_and_retokenize_to_the_sampled_tokens(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    eos = tokenizer.eos_token_id
    # bias the random model towards <eos> so that some rows stop early and others run to the limit
    model.lm_head.bias = None
    with torch.no_grad():
        saved = model.lm_head.weight[eos].clone()
        model.lm_head.weight[eos] += 0.02 * model.lm_head.weight.sum(dim=0) / 100
    try:
        generation = generate(model, tokenizer, [format_prompt(PROBLEMS[1])] * 16,
                              seeds=list(range(16)), max_new_tokens=10)
    finally:
        with torch.no_grad():
            model.lm_head.weight[eos] = saved
    for text, ids in zip(generation.responses, generation.response_ids):
        assert eos not in ids[:-1]                                          # nothing after <eos>
        assert len(ids) == 10 or ids[-1] == eos
        assert text.endswith("<eos>") == (ids[-1] == eos)
        assert tokenizer.encode(text, add_special_tokens=False) == ids


def test_a_row_does_not_depend_on_its_batch(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    rollouts = sample_groups(model, tokenizer, PROBLEMS, group_size=2, seed=5, step=3, max_new_tokens=8)
    # the last two problems alone, numbered as they were in the full batch (as a second rank does)
    half = sample_groups(model, tokenizer, PROBLEMS[2:], group_size=2, seed=5, step=3, first_index=2,
                         max_new_tokens=8)
    assert half.responses == rollouts.responses[4:]
    assert rollouts.repeated_ground_truths == ["7", "7", "58", "58", "66", "66", "891", "891"]
    one_by_one = generate(model, tokenizer, rollouts.repeated_prompts,
                          [row_seed(5, 3, k, j) for k in range(4) for j in range(2)], 8, batch_size=1)
    assert one_by_one.responses == rollouts.responses
    other_step = sample_groups(model, tokenizer, PROBLEMS, group_size=2, seed=5, step=4, max_new_tokens=8)
    assert other_step.responses != rollouts.responses


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_gumbel_max_samples_from_the_softmax(temperature):
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).repeat(20000, 1)             # (N, 4)
    sampler = RowSeededGumbelSampler(list(range(20000)), temperature)
    counts = torch.bincount(sampler(None, logits).argmax(dim=-1), minlength=4).double()
    expected = torch.softmax(logits[0].double() / temperature, dim=-1) * 20000
    # binomial standard deviations; 5 sigma keeps this seeded test far from flaky
    sigma = (expected * (1 - expected / 20000)).sqrt()
    assert ((counts - expected).abs() < 5 * sigma).all(), (counts, expected)
    # and temperature matters: the 1.0 and 0.5 expectations differ by >40 sigma on the first token
    assert abs(torch.softmax(logits[0] / 1.0, -1)[0] - torch.softmax(logits[0] / 0.5, -1)[0]) * 20000 > 40 * sigma[0]


def test_bad_arguments_raise(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match="seeds"):
        generate(model, tokenizer, ["a", "b"], seeds=[1])
    with pytest.raises(ValueError, match="temperature"):
        RowSeededGumbelSampler([1], temperature=0.0)
    with pytest.raises(ValueError, match="group_size"):
        sample_groups(model, tokenizer, PROBLEMS, group_size=0, seed=0, step=0)


def test_evaluate_is_seeded_and_greedy_is_deterministic(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    problems = make_problems(6, seed=0, split="test")
    assert evaluate(model, tokenizer, problems, seed=3, samples_per_problem=2) == \
        evaluate(model, tokenizer, problems, seed=3, samples_per_problem=2)
    greedy = evaluate(model, tokenizer, problems, seed=None)
    assert set(greedy) == {"reward", "format_reward", "answer_reward"}
    assert greedy == evaluate(model, tokenizer, problems, seed=None)


def test_at_a_temperature_every_log_prob_is_of_the_distribution_sampled(model_and_tokenizer):
    # Sampled at τ = 0.5, a row is a draw of softmax(z / 0.5): the sampler's log-probs, the
    # re-scored ones (π_old, the reference) and π_θ in the train step must all be of that
    # distribution, checked against one-sequence-at-a-time scoring of z / τ in float64.
    model, tokenizer = model_and_tokenizer
    temperature = 0.5
    rollouts = sample_groups(model, tokenizer, PROBLEMS, group_size=2, seed=0, step=1, max_new_tokens=10,
                             temperature=temperature)
    tokens = tokenize_rollouts(tokenizer, rollouts)
    mask = tokens["response_mask"].bool()
    with torch.no_grad():
        logits = model(tokens["input_ids"]).logits.double()                           # (B, T, V)
    at_t = (logits / temperature).log_softmax(-1).gather(-1, tokens["labels"][..., None])[..., 0]
    at_1 = logits.log_softmax(-1).gather(-1, tokens["labels"][..., None])[..., 0]
    torch.testing.assert_close(tokens["sampler_log_probs"][mask].double(), at_t[mask], atol=1e-5, rtol=0)
    rescored = score_tokens(model, tokens, temperature)
    torch.testing.assert_close(rescored[mask].double(), at_t[mask], atol=1e-5, rtol=0)
    # scoring at τ = 1 (the old bug) is far outside the tolerance
    assert (at_1[mask] - at_t[mask]).abs().max() > 0.1


@pytest.mark.parametrize("scored_at, ratio_is_one", [(0.5, True), (1.0, False)])
def test_the_train_step_scores_pi_theta_at_the_sampling_temperature(model_and_tokenizer, scored_at,
                                                                    ratio_is_one):
    # On-policy, π_θ = π_old: the ratio is 1 only when the train step scores π_θ at the τ the
    # old log-probs were taken at.
    from course.loop.tasks import r1_zero_reward_fn
    from course.train_step import grpo_train_step

    model, tokenizer = model_and_tokenizer
    rollouts = sample_groups(model, tokenizer, PROBLEMS, group_size=2, seed=0, step=1, max_new_tokens=10,
                             temperature=0.5)
    tokens = tokenize_rollouts(tokenizer, rollouts)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # nothing moves: the fixture is shared
    _, metadata = grpo_train_step(
        model, tokenizer, optimizer, 1, None, r1_zero_reward_fn, rollouts.repeated_prompts,
        rollouts.responses, rollouts.repeated_ground_truths, 2, advantage_normalizer="none",
        pg_method="noclip", old_log_probs=tokens["sampler_log_probs"],
        temperature=scored_at)
    ratio = float(metadata["importance_ratio_mean"])
    assert (abs(ratio - 1) < 1e-5) == ratio_is_one, ratio


def test_temperature_must_be_positive(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            generate(model, tokenizer, ["a"], seeds=[1], temperature=bad)
