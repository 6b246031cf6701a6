"""Honest work #3: a student who reaches for library calls (`pad_sequence`, `F.pad`,
`torch.nn.functional`, `torch.distributions`) and the notebooks' given helpers.

The tokenizer is the one the task all but dictates, written the way the notebook's shapes table
reads (a (B, L) batch of the pad id, filled; a (B, L) 0/1 mask): it holds most of the reference's
fingerprints without having seen it.
"""
import math

import torch
import torch.nn.functional as F

from course.aggregation import calculate_loss_and_backward
from course.chunked_head import chunked_head_log_probs
from course.distributed import rank_and_world_size
from course.losses import cispo_loss, clipped_surrogate
from course.metrics import LossStatistics
from course.off_policy import validate_grpo_config
from course.tokenization import _pad_id
from course.train_step import (
    LossTerms,
    _accumulating,
    _aligned_batch,
    _clip_and_step,
    _microbatch,
    _record,
    _sum_over_ranks,
    _validate,
    per_token_step_loss,
)


def tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer):
    if len(prompt_strs) != len(output_strs):
        raise ValueError("prompt_strs and output_strs must have the same length")
    if len(prompt_strs) == 0:
        raise ValueError("prompt_strs is empty")
    pad_id = _pad_id(tokenizer)
    sequences, masks = [], []
    for prompt, output in zip(prompt_strs, output_strs):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        output_ids = tokenizer.encode(output, add_special_tokens=False)
        sequences.append(prompt_ids + output_ids)
        masks.append([0] * len(prompt_ids) + [1] * len(output_ids))
    max_len = max(len(s) for s in sequences)
    batch = torch.full((len(sequences), max_len), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), max_len), dtype=torch.long)
    for i, (sequence, m) in enumerate(zip(sequences, masks)):
        batch[i, :len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        mask[i, :len(m)] = torch.tensor(m, dtype=torch.long)
    return {"input_ids": batch[:, :-1], "labels": batch[:, 1:], "response_mask": mask[:, 1:]}


def compute_entropy(logits):
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return torch.distributions.Categorical(logits=logits).entropy()


def get_response_log_probs(model, input_ids, labels, return_token_entropy=False,
                           logits_chunk_size=None, temperature=1.0):
    size = logits_chunk_size if logits_chunk_size is not None else \
        getattr(model.config, "grpo_logits_chunk_size", 0)
    if size < 0 or temperature <= 0:
        raise ValueError("logits_chunk_size must be >= 0 and temperature > 0")
    if size > 0:
        log_probs, entropy = chunked_head_log_probs(model, input_ids, labels, size,
                                                    return_token_entropy, temperature)
    else:
        logits = model(input_ids).logits.float() if model.dtype in (torch.float16, torch.bfloat16) \
            else model(input_ids).logits
        logits = logits / temperature
        B, T, V = logits.shape
        log_probs = -F.cross_entropy(logits.reshape(B * T, V), labels.reshape(B * T),
                                     reduction="none").reshape(B, T)
        entropy = compute_entropy(logits.detach()) if return_token_entropy else None
    if return_token_entropy:
        return {"log_probs": log_probs, "token_entropy": entropy}
    return {"log_probs": log_probs}


def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
    if not rollout_responses or len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError("rollout_responses and repeated_ground_truths: same non-zero length")
    scored = list(map(reward_fn, rollout_responses, repeated_ground_truths))
    columns = {key: torch.tensor([float(s[key]) for s in scored])
               for key in ("reward", "format_reward", "answer_reward")}
    return columns["reward"], {f"{key}_mean": column.mean().item()
                               for key, column in columns.items()}


def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                     advantage_normalizer="std"):
    if raw_rewards.numel() == 0 or raw_rewards.numel() % group_size:
        raise ValueError("raw_rewards must hold whole groups")
    if advantage_normalizer == "std" and group_size < 2:
        raise ValueError("std needs two samples per group")
    x = raw_rewards.float() if not raw_rewards.is_floating_point() else raw_rewards
    x = x.unflatten(0, (-1, group_size))
    mu = x.mean(-1, keepdim=True)
    scale = {"std": lambda: x.std(-1, keepdim=True) + advantage_eps,
             "mean": lambda: mu + advantage_eps, "none": lambda: 1.0}[advantage_normalizer]()
    shift = {"mean": mu, "none": 0.0}[baseline]
    adv = ((x - shift) / scale).flatten()
    return adv, {"advantage_mean": float(adv.mean()),
                 "advantage_std": float(adv.std()) if adv.numel() > 1 else 0.0}


def compute_policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs, pg_method="none",
                                 old_log_probs=None, cliprange=None, response_mask=None):
    advantage = raw_rewards_or_advantages.reshape(len(policy_log_probs), 1)
    advantage = advantage.type_as(policy_log_probs)
    keep = (torch.ones_like(policy_log_probs) if response_mask is None else response_mask).bool()

    def masked_mean(x, where):
        return x.detach().masked_fill(~where, 0).sum() / max(int(where.sum()), 1)

    log_p = policy_log_probs.masked_fill(~keep, 0.0)
    if pg_method == "none":
        out = -advantage * log_p
        return out, {"on_policy_loss_mean": masked_mean(out, keep)}
    if old_log_probs is None:
        raise ValueError("old_log_probs is required off-policy")
    log_old = old_log_probs.detach().masked_fill(~keep, 0.0)
    if pg_method == "gspo":
        n = keep.sum(-1, keepdim=True)
        r = torch.exp((log_p - log_old).sum(-1, keepdim=True) / n.clamp_min(1))
        counted = n > 0
    elif pg_method in ("noclip", "grpo", "cispo"):
        r = torch.exp(log_p - log_old)
        counted = keep
    else:
        raise ValueError(f"pg_method {pg_method!r}")
    if pg_method != "noclip" and (cliprange is None or cliprange <= 0):
        raise ValueError("cliprange must be > 0")
    if pg_method == "noclip":
        out = -advantage * r
    elif pg_method == "cispo":
        out = -advantage * torch.clamp(r, max=1 + cliprange).detach() * log_p
    else:
        out = -torch.minimum(r * advantage, r.clamp(1 - cliprange, 1 + cliprange) * advantage)
    out = out.expand_as(log_p).contiguous()
    meta = {"importance_ratio_mean": masked_mean(r.expand_as(counted), counted),
            "importance_ratio_count": counted.sum(), "off_policy_loss_mean": masked_mean(out, keep)}
    if pg_method != "noclip":
        upper = r > 1 + cliprange
        hit = upper if pg_method == "cispo" else \
            (upper & (advantage > 0)) | ((r < 1 - cliprange) & (advantage < 0))
        count = (hit & counted).sum()
        meta["clip_fraction"] = count / counted.sum().clamp_min(1)
        meta["clip_count"], meta["clip_total"] = count, counted.sum()
    return out, meta


def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None, response_mask=None):
    keep = None if response_mask is None else response_mask.bool()
    log_r = new_logprobs.float() - ref_logprobs.float()
    if keep is not None:
        log_r = log_r * keep
    log_r = log_r.clamp(-40, 40)
    if estimator == "k1":
        out = log_r
    elif estimator == "k2":
        out = log_r.square().div(2)
    elif estimator == "k3":
        out = (-log_r).exp().sub(1).add(log_r)
    elif estimator == "ratio_k1" and ratio is not None:
        out = (ratio if keep is None else ratio.masked_fill(~keep, 0)) * log_r
    else:
        raise ValueError(f"cannot estimate KL with {estimator!r}")
    return out


def truncated_importance_weights(old_log_probs, sampler_log_probs, cap, response_mask=None):
    if cap <= 0:
        raise ValueError("cap must be positive")
    log_ratio = (old_log_probs - sampler_log_probs).detach().float()
    if response_mask is not None:
        log_ratio = log_ratio.masked_fill(~response_mask.bool(), -math.inf)
    return F.threshold(-log_ratio, -math.log(cap), -math.log(cap)).neg().exp()


def compute_grpo_loss(new_logprobs, ratio, advantages, ref_logprobs, config, tis_weights=None):
    validate_grpo_config(config)
    advantages = advantages.reshape(-1, 1).type_as(new_logprobs)
    if config.loss_fn == "dapo":
        first, second, worst = clipped_surrogate(ratio, advantages, config.clip_lower,
                                                 config.clip_higher)
    else:
        first = second = worst = cispo_loss(ratio, advantages, new_logprobs, config.clip_higher)
    weighted = worst if tis_weights is None else worst * tis_weights.detach()
    kl = torch.zeros_like(new_logprobs) if ref_logprobs is None else \
        estimate_kl(new_logprobs, ref_logprobs, config.kl_estimator, ratio)
    return first, second, weighted, kl


def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                     normalization_constant=None):
    if loss_normalization not in ("sequence", "token", "constant"):
        raise ValueError(loss_normalization)
    if normalization_constant is not None and not normalization_constant > 0:
        raise ValueError("normalization_constant must be > 0")
    if loss_normalization == "constant" and normalization_constant is None:
        raise ValueError("constant normalization needs normalization_constant")
    loss = per_token_policy_gradient_loss.masked_fill(~mask.bool(), 0)
    if loss_normalization == "sequence":
        rows = [row.sum() / max(int(m.sum()), 1) for row, m in zip(loss, mask)]
        return torch.stack(rows).mean()
    divisor = normalization_constant or max(int(mask.sum()), 1)
    return loss.sum() / divisor


def grpo_train_step(model, tokenizer, optimizer, gradient_accumulation_steps, max_grad_norm,
                    reward_fn, repeated_prompts, rollout_responses, repeated_ground_truths,
                    group_size, baseline="mean", advantage_eps=1e-6, advantage_normalizer="std",
                    pg_method="none", old_log_probs=None, cliprange=None,
                    loss_normalization="sequence", normalization_constant=None, kl_beta=0.0,
                    kl_estimator="k3", ref_log_probs=None, ref_model=None,
                    sampler_log_probs=None, tis_cap=2.0, temperature=1.0):
    settings = LossTerms(pg_method, cliprange, kl_beta, kl_estimator, ref_model, tis_cap,
                         temperature)
    given = {"old_log_probs": old_log_probs, "ref_log_probs": ref_log_probs,
             "sampler_log_probs": sampler_log_probs}
    _validate(len(rollout_responses), repeated_prompts, repeated_ground_truths, group_size,
              gradient_accumulation_steps, loss_normalization, normalization_constant,
              settings, given)
    rewards, info = compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)
    advantages, more = compute_group_normalized_rewards(rewards, group_size, baseline,
                                                        advantage_eps, advantage_normalizer)
    info = {**info, **more}
    batch = _aligned_batch(tokenize_prompt_and_output(repeated_prompts, rollout_responses,
                                                      tokenizer), advantages, given)
    world_size = rank_and_world_size()[1]
    sequences = _sum_over_ranks(torch.tensor(len(advantages), dtype=torch.float64))
    tokens = _sum_over_ranks(batch["response_mask"].sum().to(torch.float64))
    running = LossStatistics()
    optimizer.zero_grad(set_to_none=True)
    groups = torch.arange(len(advantages)).tensor_split(gradient_accumulation_steps)
    for number, rows in enumerate(groups, start=1):
        with _accumulating(model, last=number == len(groups)):
            micro = _microbatch(batch, rows, next(model.parameters()).device)
            losses, details = per_token_step_loss(model, micro, settings)
            step_loss = calculate_loss_and_backward(losses, micro["response_mask"],
                                                    loss_normalization, sequences, tokens,
                                                    normalization_constant, world_size)
        _record(running, details, micro["response_mask"], step_loss / world_size)
    averages = {name: torch.tensor(value, dtype=torch.float64)
                for name, value in running.compute().items()}
    norm = _clip_and_step(model, optimizer, max_grad_norm, averages.pop("non_finite_losses"))
    return averages["loss"], {**info, **averages, "gradient_norm": norm, "optimizer_step": 1.0,
                              "response_token_count": tokens}
