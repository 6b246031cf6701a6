"""Honest work #1: the first, natural implementation of each graded function.

What a student writes who follows the notebooks: their docstrings, shapes and given helpers
(`_pad_id`, `chunked_head_log_probs`, `clipped_surrogate`, `cispo_loss`, the train step's
`per_token_step_loss` and friends), one obvious step after another. Written without the
reference open; it is close to it because the task all but dictates the code.
"""
import math

import torch

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
        raise ValueError("need one output per prompt")
    if len(prompt_strs) == 0:
        raise ValueError("nothing to tokenize")
    pad = _pad_id(tokenizer)
    all_ids, all_masks = [], []
    for prompt, output in zip(prompt_strs, output_strs):
        p = tokenizer.encode(prompt, add_special_tokens=False)
        o = tokenizer.encode(output, add_special_tokens=False)
        all_ids.append(p + o)
        all_masks.append([0] * len(p) + [1] * len(o))
    max_len = max(len(ids) for ids in all_ids)
    for i in range(len(all_ids)):
        missing = max_len - len(all_ids[i])
        all_ids[i] = all_ids[i] + [pad] * missing
        all_masks[i] = all_masks[i] + [0] * missing
    ids = torch.tensor(all_ids)
    mask = torch.tensor(all_masks)
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "response_mask": mask[:, 1:]}


def compute_entropy(logits):
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    log_p = torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    return -(p * log_p).nan_to_num().sum(dim=-1)


def get_response_log_probs(model, input_ids, labels, return_token_entropy=False,
                           logits_chunk_size=None, temperature=1.0):
    if logits_chunk_size is None:
        logits_chunk_size = getattr(model.config, "grpo_logits_chunk_size", 0)
    if logits_chunk_size < 0:
        raise ValueError("logits_chunk_size must be >= 0")
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    if logits_chunk_size > 0:
        log_probs, entropy = chunked_head_log_probs(model, input_ids, labels, logits_chunk_size,
                                                    return_token_entropy, temperature)
    else:
        logits = model(input_ids).logits
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        logits = logits / temperature
        log_probs = torch.log_softmax(logits, dim=-1)
        log_probs = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        entropy = None
        if return_token_entropy:
            with torch.no_grad():
                entropy = compute_entropy(logits)
    out = {"log_probs": log_probs}
    if return_token_entropy:
        out["token_entropy"] = entropy
    return out


def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError("one ground truth per response")
    if not rollout_responses:
        raise ValueError("no responses")
    rewards, formats, answers = [], [], []
    for response, truth in zip(rollout_responses, repeated_ground_truths):
        r = reward_fn(response, truth)
        rewards.append(r["reward"])
        formats.append(r["format_reward"])
        answers.append(r["answer_reward"])
    n = len(rewards)
    metadata = {"reward_mean": sum(rewards) / n, "format_reward_mean": sum(formats) / n,
                "answer_reward_mean": sum(answers) / n}
    return torch.tensor(rewards, dtype=torch.float32), metadata


def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                     advantage_normalizer="std"):
    if raw_rewards.numel() % group_size != 0:
        raise ValueError("the batch is not a whole number of groups")
    if baseline not in ("mean", "none") or advantage_normalizer not in ("std", "mean", "none"):
        raise ValueError("unknown baseline or normalizer")
    if advantage_normalizer == "std" and group_size < 2:
        raise ValueError("std needs groups of 2 or more")
    groups = raw_rewards.float().view(-1, group_size)
    means = groups.mean(dim=-1, keepdim=True)
    if baseline == "mean":
        centered = groups - means
    else:
        centered = groups
    if advantage_normalizer == "std":
        centered = centered / (groups.std(dim=-1, keepdim=True) + advantage_eps)
    elif advantage_normalizer == "mean":
        centered = centered / (means + advantage_eps)
    advantages = centered.flatten()
    return advantages, {"advantage_mean": advantages.mean().item(),
                        "advantage_std": advantages.std().item()}


def compute_policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs, pg_method="none",
                                 old_log_probs=None, cliprange=None, response_mask=None):
    if pg_method not in ("none", "noclip", "grpo", "gspo", "cispo"):
        raise ValueError(f"unknown pg_method {pg_method}")
    A = raw_rewards_or_advantages.reshape(-1, 1).to(policy_log_probs.dtype)
    if response_mask is None:
        response_mask = torch.ones_like(policy_log_probs)
    mask = response_mask.bool()
    log_probs = torch.where(mask, policy_log_probs, 0.0)
    n = mask.sum().clamp(min=1)
    if pg_method == "none":
        loss = -A * log_probs
        return loss, {"on_policy_loss_mean": (loss.detach() * mask).sum() / n}
    if old_log_probs is None:
        raise ValueError(f"{pg_method} needs old_log_probs")
    if pg_method != "noclip" and (cliprange is None or cliprange <= 0):
        raise ValueError(f"{pg_method} needs a positive cliprange")
    old = torch.where(mask, old_log_probs.detach(), 0.0)
    if pg_method == "gspo":
        lengths = mask.sum(dim=1, keepdim=True).clamp(min=1)
        ratio = torch.exp((log_probs - old).sum(dim=1, keepdim=True) / lengths)
        counted = mask.sum(dim=1, keepdim=True) > 0
    else:
        ratio = torch.exp(log_probs - old)
        counted = mask
    if pg_method == "noclip":
        loss = -A * ratio
    elif pg_method == "cispo":
        loss = cispo_loss(ratio, A, log_probs, cliprange)
        was_clipped = ratio > 1 + cliprange
    else:
        loss = clipped_surrogate(ratio, A, cliprange, cliprange)[2]
        was_clipped = ((A > 0) & (ratio > 1 + cliprange)) | ((A < 0) & (ratio < 1 - cliprange))
    loss = loss.expand_as(log_probs)
    n_counted = counted.sum()
    metadata = {
        "importance_ratio_mean": (ratio.detach() * counted).sum() / n_counted.clamp(min=1),
        "importance_ratio_count": n_counted,
        "off_policy_loss_mean": (loss.detach() * mask).sum() / n,
    }
    if pg_method != "noclip":
        clip_count = (was_clipped & counted).sum()
        metadata["clip_fraction"] = clip_count / n_counted.clamp(min=1)
        metadata["clip_count"] = clip_count
        metadata["clip_total"] = n_counted
    return loss, metadata


def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None, response_mask=None):
    if estimator not in ("k1", "k2", "k3", "ratio_k1"):
        raise ValueError(f"unknown estimator {estimator}")
    log_ratio = new_logprobs.float() - ref_logprobs.float()
    if response_mask is not None:
        log_ratio = log_ratio.masked_fill(~response_mask.bool(), 0.0)
    log_ratio = log_ratio.clamp(min=-40, max=40)
    if estimator == "k1":
        return log_ratio
    elif estimator == "k2":
        return 0.5 * log_ratio ** 2
    elif estimator == "k3":
        return torch.exp(-log_ratio) - 1 + log_ratio
    if ratio is None:
        raise ValueError("ratio_k1 needs ratio")
    if response_mask is not None:
        ratio = ratio.masked_fill(~response_mask.bool(), 0.0)
    return ratio * log_ratio


def truncated_importance_weights(old_log_probs, sampler_log_probs, cap, response_mask=None):
    if cap <= 0:
        raise ValueError("cap must be positive")
    with torch.no_grad():
        diff = (old_log_probs - sampler_log_probs).float()
        diff = diff.clamp(max=math.log(cap))
        weights = diff.exp()
        if response_mask is not None:
            weights = weights * response_mask
    return weights


def compute_grpo_loss(new_logprobs, ratio, advantages, ref_logprobs, config, tis_weights=None):
    validate_grpo_config(config)
    A = advantages.reshape(-1, 1).to(new_logprobs.dtype)
    if config.loss_fn == "dapo":
        pg_losses = -A * ratio
        pg_losses2 = -A * torch.clamp(ratio, 1 - config.clip_lower, 1 + config.clip_higher)
        pg_loss_max = torch.max(pg_losses, pg_losses2)
    else:
        pg_losses = cispo_loss(ratio, A, new_logprobs, config.clip_higher)
        pg_losses2 = pg_losses
        pg_loss_max = pg_losses
    if tis_weights is not None:
        pg_loss_max = pg_loss_max * tis_weights
    if ref_logprobs is not None:
        kl = estimate_kl(new_logprobs, ref_logprobs, config.kl_estimator, ratio)
    else:
        kl = torch.zeros_like(new_logprobs)
    return pg_losses, pg_losses2, pg_loss_max, kl


def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                     normalization_constant=None):
    if loss_normalization not in ("sequence", "token", "constant"):
        raise ValueError(f"unknown loss_normalization {loss_normalization}")
    if loss_normalization == "constant" and normalization_constant is None:
        raise ValueError("constant needs normalization_constant")
    if normalization_constant is not None and normalization_constant <= 0:
        raise ValueError("normalization_constant must be positive")
    mask = mask.bool()
    loss = torch.where(mask, per_token_policy_gradient_loss, 0.0)
    if loss_normalization == "sequence":
        per_sequence = loss.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return per_sequence.mean()
    if normalization_constant is None:
        normalization_constant = mask.sum().clamp(min=1)
    return loss.sum() / normalization_constant


def grpo_train_step(model, tokenizer, optimizer, gradient_accumulation_steps, max_grad_norm,
                    reward_fn, repeated_prompts, rollout_responses, repeated_ground_truths,
                    group_size, baseline="mean", advantage_eps=1e-6, advantage_normalizer="std",
                    pg_method="none", old_log_probs=None, cliprange=None,
                    loss_normalization="sequence", normalization_constant=None, kl_beta=0.0,
                    kl_estimator="k3", ref_log_probs=None, ref_model=None,
                    sampler_log_probs=None, tis_cap=2.0, temperature=1.0):
    terms = LossTerms(pg_method, cliprange, kl_beta, kl_estimator, ref_model, tis_cap, temperature)
    aligned = {"old_log_probs": old_log_probs, "ref_log_probs": ref_log_probs,
               "sampler_log_probs": sampler_log_probs}
    _validate(len(rollout_responses), repeated_prompts, repeated_ground_truths, group_size,
              gradient_accumulation_steps, loss_normalization, normalization_constant, terms,
              aligned)
    _, world_size = rank_and_world_size()
    rewards, reward_meta = compute_rollout_rewards(reward_fn, rollout_responses,
                                                   repeated_ground_truths)
    advantages, advantage_meta = compute_group_normalized_rewards(
        rewards, group_size, baseline, advantage_eps, advantage_normalizer)
    batch = _aligned_batch(tokenize_prompt_and_output(repeated_prompts, rollout_responses,
                                                      tokenizer), advantages, aligned)
    n_sequences = _sum_over_ranks(torch.tensor(float(len(advantages)), dtype=torch.float64))
    n_tokens = _sum_over_ranks(batch["response_mask"].sum().double())
    stats = LossStatistics()
    optimizer.zero_grad()
    chunks = list(torch.arange(len(advantages)).tensor_split(gradient_accumulation_steps))
    device = next(model.parameters()).device
    for k, rows in enumerate(chunks):
        with _accumulating(model, last=(k == len(chunks) - 1)):
            micro = _microbatch(batch, rows, device)
            per_token, meta = per_token_step_loss(model, micro, terms)
            loss = calculate_loss_and_backward(per_token, micro["response_mask"],
                                               loss_normalization, n_sequences, n_tokens,
                                               normalization_constant, world_size)
        _record(stats, meta, micro["response_mask"], loss / world_size)
    metrics = {}
    for key, value in stats.compute().items():
        metrics[key] = torch.tensor(value, dtype=torch.float64)
    bad = metrics.pop("non_finite_losses")
    grad_norm = _clip_and_step(model, optimizer, max_grad_norm, bad)
    metadata = {**reward_meta, **advantage_meta, **metrics, "gradient_norm": grad_norm,
                "optimizer_step": 1.0, "response_token_count": n_tokens}
    return metrics["loss"], metadata
