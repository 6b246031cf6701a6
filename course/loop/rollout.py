"""Rollouts: sampling groups of responses with transformers' `generate`, and scoring them.

GRPO (Shao et al. 2024, arXiv 2402.03300) samples G responses per prompt and compares them with
each other. Three details decide whether the numbers downstream are right:

* Left padding. A batch of prompts of different lengths is padded on the left, so every row's
  next token is generated at the same column; the attention mask keeps pad tokens out of every
  row's context and positions count from each row's first real token. `tests/test_rollout.py`
  checks that a padded batch gives the same log-probs as scoring each sequence alone.
* Row-seeded sampling. Each row draws its tokens with the Gumbel-max trick (Gumbel 1954; argmax of
  logits/τ plus Gumbel noise is a sample of softmax(logits/τ)) from its own generator, seeded by
  (run seed, step, prompt index, sample index). A response therefore does not depend on which
  other rows shared its batch: generation batch size, padding and data-parallel sharding change
  nothing, which is what lets `torchrun` reproduce a single-process run.
* Old log-probs, at the sampling temperature. A row sampled at τ was drawn from softmax(z/τ), so
  every log-prob of it, the sampler's, π_old's, π_θ's and the reference's, is a log-prob of
  softmax(z/τ): the logits are divided by τ before scoring, as open-instruct
  (open_instruct/grpo_fast.py) and TRL (trl/trainer/grpo_trainer.py) do before their log-softmax.
  Scored at τ = 1 instead, the ratio π/π_old and the TIS
  weights would be those of another distribution. The sampler's log-probs come from the raw logits
  of `generate` divided by τ and are placed on the tokenization the train step uses
  (`tokenize_rollouts`), position for position; the trainer's come from re-scoring that batch
  (`score_tokens`, at the same τ). In float32 the two agree to ~1e-6, so the sampler's serve as old
  log-probs; in bf16 they differ, which is what `course.compare_logprobs` and truncated importance
  sampling (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
  training") are about.

A response string is the decoded sample including a final "<eos>" when the model stopped, so
re-tokenizing it reproduces exactly the sampled tokens and the train step learns when to stop.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from course.loop.tasks import ADDITION, Task, TaskProblem
from course.scoring import get_response_log_probs
from course.tokenization import tokenize_prompt_and_output


def row_seed(*keys: int | str) -> int:
    """A 63-bit seed from a tuple of keys, the same in every process (unlike `hash` of a str)."""
    digest = hashlib.blake2b("/".join(map(str, keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class RowSeededGumbelSampler(LogitsProcessor):
    """Turns greedy decoding into sampling at `temperature`, one generator per row.

    Returns logits/τ + Gumbel noise (float32); `generate(do_sample=False)` then takes the argmax,
    which is distributed as softmax(logits/τ).
    """

    def __init__(self, seeds: list[int], temperature: float = 1.0):
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]
        self.temperature = temperature

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if scores.shape[0] != len(self.generators):
            raise ValueError(f"scores has {scores.shape[0]} rows, sampler has "
                             f"{len(self.generators)} seeds")
        vocab = scores.shape[-1]
        uniform = torch.stack([torch.rand(vocab, generator=g) for g in self.generators])  # (B, V)
        gumbel = -torch.log(-torch.log(uniform.clamp(1e-10, 1.0 - 1e-7)))
        return scores.float() / self.temperature + gumbel.to(scores.device)


@dataclass
class Generation:
    """Sampled responses, row-aligned with the prompts that produced them."""

    responses: list[str]                    # decoded, with a final "<eos>" when the model stopped
    response_ids: list[list[int]]           # the sampled token ids, <eos> included
    # per row (len(response_ids[i]),), float32, of softmax(z/τ)
    sampler_log_probs: list[torch.Tensor]


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[str],
    seeds: list[int] | None,
    max_new_tokens: int = 16,
    temperature: float = 1.0,
    batch_size: int = 256,
) -> Generation:
    """Complete each prompt once: sampled with per-row `seeds`, or greedy when `seeds` is None.

    Prompts are tokenized without special tokens (as `tokenize_prompt_and_output` does), padded
    on the left, and generation stops at <eos> or after `max_new_tokens`. The sampler's log-probs
    are those of softmax(logits / `temperature`), the distribution sampled from.
    """
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature)
            and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    if seeds is not None and len(seeds) != len(prompts):
        raise ValueError(f"seeds has {len(seeds)} entries for {len(prompts)} prompts")
    responses, response_ids, log_probs = [], [], []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        chunk_seeds = None if seeds is None else seeds[start:start + batch_size]
        part = _generate_batch(model, tokenizer, chunk, chunk_seeds, max_new_tokens, temperature)
        responses += part.responses
        response_ids += part.response_ids
        log_probs += part.sampler_log_probs
    return Generation(responses, response_ids, log_probs)


def _generate_batch(model, tokenizer, prompts, seeds, max_new_tokens, temperature) -> Generation:
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        batch = tokenizer(prompts, padding=True, add_special_tokens=False, return_tensors="pt")
    finally:
        tokenizer.padding_side = padding_side
    device = next(model.parameters()).device
    processors = LogitsProcessorList()
    if seeds is not None:
        processors.append(RowSeededGumbelSampler(seeds, temperature))
    output = model.generate(
        input_ids=batch["input_ids"].to(device),
        attention_mask=batch["attention_mask"].to(device),
        do_sample=False,
        logits_processor=processors,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        output_logits=True,
        return_dict_in_generate=True,
    )
    new_tokens = output.sequences[:, batch["input_ids"].shape[1]:].cpu()            # (B, N)
    raw_logits = torch.stack(output.logits, dim=1).float().cpu()                    # (B, N, V)
    # log softmax(z/τ): the distribution the Gumbel-max sampler drew from
    token_log_probs = (raw_logits / temperature).log_softmax(-1)                     # (B, N, V)
    token_log_probs = token_log_probs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)  # (B, N)
    responses, response_ids, log_probs = [], [], []
    for row, row_log_probs in zip(new_tokens.tolist(), token_log_probs):
        # Keep tokens up to and including the first <eos>; what follows is generate's padding.
        length = (
            row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
        )
        response_ids.append(row[:length])
        log_probs.append(row_log_probs[:length].clone())
        responses.append(tokenizer.decode(row[:length], skip_special_tokens=False))
    return Generation(responses, response_ids, log_probs)


@dataclass
class RolloutBatch:
    """One step's rollouts: G consecutive rows per prompt, as `grpo_train_step` expects them."""

    repeated_prompts: list[str]
    responses: list[str]
    repeated_ground_truths: list[str]
    sampler_log_probs: list[torch.Tensor]
    response_ids: list[list[int]] | None = None   # the sampled ids, <eos> included

    def __len__(self) -> int:
        return len(self.responses)


def sample_groups(
    model,
    tokenizer,
    problems: list[TaskProblem],
    group_size: int,
    seed: int,
    step: int,
    first_index: int = 0,
    max_new_tokens: int = 16,
    temperature: float = 1.0,
    task: Task = ADDITION,
) -> RolloutBatch:
    """`group_size` samples for each problem; problem k is number `first_index + k` of this step.

    The sample of (seed, step, problem number, j) is the same whichever process draws it.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    prompts = [task.prompt(p) for p in problems for _ in range(group_size)]
    seeds = [row_seed(seed, step, first_index + k, j)
             for k in range(len(problems)) for j in range(group_size)]
    generation = generate(model, tokenizer, prompts, seeds, max_new_tokens, temperature)
    truths = [p.answer for p in problems for _ in range(group_size)]
    return RolloutBatch(prompts, generation.responses, truths, generation.sampler_log_probs,
                        generation.response_ids)


def tokenize_rollouts(
    tokenizer, rollouts: RolloutBatch, retokenized: str = "raise"
) -> dict[str, torch.Tensor]:
    """The train step's tokenization of the rollouts, with the sampler's log-probs placed on it.

    Returns `input_ids`, `labels`, `response_mask` as `tokenize_prompt_and_output` makes them and
    `sampler_log_probs` (B, T): each row's sampled-token log-probs at its response positions, 0
    elsewhere. A BPE tokenizer can encode a decoded sample differently from how it was sampled
    (two tokens the sampler chose that one merge covers); such a row's sampler log-probs belong to
    other tokens. `retokenized="raise"` raises on one; `"nan"` gives that row NaN sampler log-probs
    (the trainer then re-scores it: `course.train`).
    """
    tokens = tokenize_prompt_and_output(rollouts.repeated_prompts, rollouts.responses, tokenizer)
    mask = tokens["response_mask"].bool()                                       # (B, T)
    sampled = [len(x) for x in rollouts.sampler_log_probs]
    same = _sampled_tokens_kept(tokens, mask, rollouts, sampled)
    if retokenized == "raise" and not all(same):
        raise ValueError(f"response lengths after tokenization {mask.sum(dim=1).tolist()} differ "
                         "from "
                         f"sampled {sampled}")
    sampler = torch.zeros(mask.shape, dtype=torch.float32)
    for row, (keep, log_probs) in enumerate(zip(same, rollouts.sampler_log_probs)):
        sampler[row, mask[row]] = log_probs if keep else torch.nan
    return {**tokens, "sampler_log_probs": sampler}


def _sampled_tokens_kept(tokens: dict, mask: torch.Tensor, rollouts: RolloutBatch,
                         sampled: list[int]) -> list[bool]:
    """Per row: whether the tokenized response is the sampled one (its ids, where they are
    known)."""
    lengths = mask.sum(dim=1).tolist()
    if rollouts.response_ids is None:
        return [a == b for a, b in zip(lengths, sampled)]
    return [tokens["labels"][row, mask[row]].tolist() == ids
            for row, ids in enumerate(rollouts.response_ids)]


@torch.no_grad()
def score_tokens(model, tokens: dict[str, torch.Tensor], temperature: float = 1.0) -> torch.Tensor:
    """log softmax(z/τ)(labels) (B, T), float32 on the CPU, for a batch from `tokenize_rollouts`
    sampled at τ = `temperature`."""
    device = next(model.parameters()).device
    log_probs = get_response_log_probs(model, tokens["input_ids"].to(device),
                                       tokens["labels"].to(device),
                                       temperature=temperature)
    return log_probs["log_probs"].float().cpu()


def evaluate(
    model,
    tokenizer,
    problems: list[TaskProblem],
    seed: int | None,
    samples_per_problem: int = 1,
    max_new_tokens: int = 16,
    batch_size: int = 256,
    task: Task = ADDITION,
) -> dict[str, float]:
    """Mean `reward`, `format_reward`, `answer_reward` over `problems`.

    `seed=None` decodes greedily (one response each); otherwise `samples_per_problem` samples at
    temperature 1, seeded per (seed, problem, sample) so two policies see the same noise.
    """
    repeats = 1 if seed is None else samples_per_problem
    prompts = [task.prompt(p) for p in problems for _ in range(repeats)]
    seeds = None if seed is None else [row_seed(seed, "eval", k, j)
                                       for k in range(len(problems)) for j in range(repeats)]
    was_training = model.training
    model.eval()
    try:
        generation = generate(model, tokenizer, prompts, seeds, max_new_tokens,
                              batch_size=batch_size)
    finally:
        model.train(was_training)
    truths = [p.answer for p in problems for _ in range(repeats)]
    scores = [task.reward_fn(r, t) for r, t in zip(generation.responses, truths)]
    return {key: sum(s[key] for s in scores) / max(len(scores), 1)
            for key in ("reward", "format_reward", "answer_reward")}
