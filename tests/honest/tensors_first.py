"""Honest work #2: a student who builds tensors first and fills them, as the notebooks' shapes say.

Preallocated (B, L) tensors filled row by row, `torch.where` for masks, explicit dtype handling:
the second most common way to write these functions, written without the reference open.
"""

import torch

from course.aggregation import calculate_loss_and_backward
from course.chunked_head import chunked_head_log_probs
from course.distributed import rank_and_world_size
from course.losses import cispo_loss, clipped_surrogate
from course.metrics import LossStatistics
from course.off_policy import validate_grpo_config
from course.tokenization import _pad_id
from course.train_step import (
    ALIGNED_LOG_PROBS,
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
        raise ValueError(f"{len(prompt_strs)} prompts but {len(output_strs)} outputs")
    if not prompt_strs:
        raise ValueError("empty batch")
    pad_id = _pad_id(tokenizer)
    prompts = [tokenizer.encode(p, add_special_tokens=False) for p in prompt_strs]
    outputs = [tokenizer.encode(o, add_special_tokens=False) for o in output_strs]
    L = max(len(p) + len(o) for p, o in zip(prompts, outputs))
    full = torch.full((len(prompts), L), pad_id, dtype=torch.long)
    is_response = torch.zeros((len(prompts), L), dtype=torch.long)
    for i, (p, o) in enumerate(zip(prompts, outputs)):
        full[i, :len(p) + len(o)] = torch.tensor(p + o, dtype=torch.long)
        is_response[i, len(p):len(p) + len(o)] = 1
    return {"input_ids": full[:, :-1], "labels": full[:, 1:],
            "response_mask": is_response[:, 1:]}


def compute_entropy(logits):
    if logits.shape[-1] == 0:
        raise ValueError("empty vocabulary")
    x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    log_z = torch.logsumexp(x, dim=-1, keepdim=True)
    probs = torch.exp(x - log_z)
    return (probs * (log_z - x)).sum(dim=-1)


def get_response_log_probs(model, input_ids, labels, return_token_entropy=False,
                           logits_chunk_size=None, temperature=1.0):
    chunk = logits_chunk_size
    if chunk is None:
        chunk = getattr(getattr(model, "config", None), "grpo_logits_chunk_size", 0) or 0
    if not isinstance(chunk, int) or chunk < 0:
        raise ValueError(f"bad logits_chunk_size {chunk!r}")
    if not temperature > 0:
        raise ValueError(f"bad temperature {temperature!r}")
    result = {}
    if chunk:
        lp, ent = chunked_head_log_probs(model, input_ids, labels, chunk, return_token_entropy,
                                         temperature)
        result["log_probs"] = lp
        if return_token_entropy:
            result["token_entropy"] = ent
        return result
    logits = model(input_ids=input_ids).logits
    if logits.dtype != torch.float64:
        logits = logits.float()
    scaled = logits / temperature
    log_softmax = scaled - torch.logsumexp(scaled, dim=-1, keepdim=True)
    result["log_probs"] = torch.gather(log_softmax, 2, labels[:, :, None])[:, :, 0]
    if return_token_entropy:
        result["token_entropy"] = compute_entropy(scaled.detach())
    return result


def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
    if len(rollout_responses) != len(repeated_ground_truths) or len(rollout_responses) == 0:
        raise ValueError("responses and ground truths must be non-empty and of one length")
    table = torch.zeros(len(rollout_responses), 3, dtype=torch.float32)
    for i in range(len(rollout_responses)):
        out = reward_fn(rollout_responses[i], repeated_ground_truths[i])
        table[i, 0] = out["reward"]
        table[i, 1] = out["format_reward"]
        table[i, 2] = out["answer_reward"]
    means = table.mean(dim=0)
    return table[:, 0].clone(), {"reward_mean": float(means[0]),
                                 "format_reward_mean": float(means[1]),
                                 "answer_reward_mean": float(means[2])}


def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                     advantage_normalizer="std"):
    n = raw_rewards.shape[0]
    if group_size <= 0 or n == 0 or n % group_size:
        raise ValueError(f"{n} rewards do not split into groups of {group_size}")
    if advantage_normalizer == "std" and group_size == 1:
        raise ValueError("std of a group of one")
    r = raw_rewards.to(torch.float64 if raw_rewards.dtype == torch.float64 else torch.float32)
    advantages = torch.empty_like(r)
    for start in range(0, n, group_size):
        g = r[start:start + group_size]
        a = g - g.mean() if baseline == "mean" else g.clone()
        if advantage_normalizer == "std":
            a = a / (g.std() + advantage_eps)
        elif advantage_normalizer == "mean":
            a = a / (g.mean() + advantage_eps)
        elif advantage_normalizer != "none":
            raise ValueError(advantage_normalizer)
        advantages[start:start + group_size] = a
    return advantages, {"advantage_mean": advantages.mean().item(),
                        "advantage_std": advantages.std().item() if n > 1 else 0.0}


def compute_policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs, pg_method="none",
                                 old_log_probs=None, cliprange=None, response_mask=None):
    B, T = policy_log_probs.shape
    adv = raw_rewards_or_advantages.view(B, 1).to(policy_log_probs.dtype)
    m = torch.ones(B, T, dtype=torch.bool) if response_mask is None else response_mask > 0
    lp = policy_log_probs.masked_fill(~m, 0)
    tokens = m.sum().clamp_min(1)
    if pg_method == "none":
        per_token = -(adv * lp)
        return per_token, {"on_policy_loss_mean": per_token.detach().masked_fill(~m, 0).sum()
                           / tokens}
    if pg_method not in ("noclip", "grpo", "gspo", "cispo"):
        raise ValueError(pg_method)
    if old_log_probs is None or (pg_method != "noclip" and not cliprange):
        raise ValueError(f"{pg_method}: old_log_probs and cliprange are required")
    log_r = lp - old_log_probs.detach().masked_fill(~m, 0)
    if pg_method == "gspo":
        seq_len = m.sum(1, keepdim=True)
        ratio = (log_r.sum(1, keepdim=True) / seq_len.clamp_min(1)).exp()
        where = seq_len > 0
    else:
        ratio = log_r.exp()
        where = m
    clipped = None
    if pg_method == "noclip":
        per_token = -adv * ratio
    elif pg_method == "cispo":
        per_token = cispo_loss(ratio, adv, lp, cliprange)
        clipped = ratio > 1 + cliprange
    else:
        per_token = clipped_surrogate(ratio, adv, cliprange, cliprange)[-1]
        clipped = torch.where(adv > 0, ratio > 1 + cliprange, ratio < 1 - cliprange) & (adv != 0)
    per_token = per_token.expand(B, T).contiguous()
    count = where.sum()
    meta = {"importance_ratio_mean": ratio.detach().masked_fill(~where, 0).sum()
            / count.clamp_min(1),
            "importance_ratio_count": count,
            "off_policy_loss_mean": per_token.detach().masked_fill(~m, 0).sum() / tokens}
    if clipped is not None:
        hits = (clipped & where).sum()
        meta.update(clip_fraction=hits / count.clamp_min(1), clip_count=hits, clip_total=count)
    return per_token, meta


def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None, response_mask=None):
    d = (new_logprobs - ref_logprobs).float()
    if response_mask is not None:
        d = torch.where(response_mask > 0, d, torch.zeros_like(d))
    d = torch.clamp(d, -40.0, 40.0)
    table = {"k1": lambda: d, "k2": lambda: d * d / 2, "k3": lambda: torch.expm1(-d) + d}
    if estimator in table:
        return table[estimator]()
    if estimator != "ratio_k1" or ratio is None:
        raise ValueError(f"estimator {estimator!r} (ratio_k1 needs ratio)")
    if response_mask is not None:
        ratio = torch.where(response_mask > 0, ratio, torch.zeros_like(ratio))
    return ratio * d


def truncated_importance_weights(old_log_probs, sampler_log_probs, cap, response_mask=None):
    if not cap > 0:
        raise ValueError(f"cap {cap} must be > 0")
    log_w = (old_log_probs.detach() - sampler_log_probs.detach()).float()
    w = torch.minimum(log_w.exp(), torch.tensor(float(cap)))
    w = torch.nan_to_num(w, nan=0.0)
    if response_mask is not None:
        w = torch.where(response_mask > 0, w, torch.zeros_like(w))
    return w


def compute_grpo_loss(new_logprobs, ratio, advantages, ref_logprobs, config, tis_weights=None):
    validate_grpo_config(config)
    adv = advantages.view(-1, 1).to(ratio.dtype)
    if config.loss_fn == "cispo":
        loss = cispo_loss(ratio, adv, new_logprobs, config.clip_higher)
        out = [loss, loss, loss]
    else:
        low, high = 1 - config.clip_lower, 1 + config.clip_higher
        unclipped = -adv * ratio
        clipped = -adv * ratio.clamp(low, high)
        out = [unclipped, clipped, torch.maximum(unclipped, clipped)]
    if tis_weights is not None:
        out[2] = out[2] * tis_weights.detach()
    if ref_logprobs is None:
        out.append(torch.zeros_like(new_logprobs))
    else:
        out.append(estimate_kl(new_logprobs, ref_logprobs, config.kl_estimator, ratio))
    return tuple(out)


def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                     normalization_constant=None):
    if normalization_constant is not None and normalization_constant <= 0:
        raise ValueError("normalization_constant must be positive")
    m = mask.to(per_token_policy_gradient_loss.dtype)
    total = torch.where(mask.bool(), per_token_policy_gradient_loss,
                        torch.zeros_like(per_token_policy_gradient_loss))
    if loss_normalization == "sequence":
        return (total.sum(-1) / m.sum(-1).clamp_min(1)).mean()
    if loss_normalization == "token":
        denominator = normalization_constant if normalization_constant is not None \
            else m.sum().clamp_min(1)
        return total.sum() / denominator
    if loss_normalization == "constant":
        if normalization_constant is None:
            raise ValueError("constant needs a normalization_constant")
        return total.sum() / normalization_constant
    raise ValueError(f"unknown loss_normalization {loss_normalization!r}")


def grpo_train_step(model, tokenizer, optimizer, gradient_accumulation_steps, max_grad_norm,
                    reward_fn, repeated_prompts, rollout_responses, repeated_ground_truths,
                    group_size, baseline="mean", advantage_eps=1e-6, advantage_normalizer="std",
                    pg_method="none", old_log_probs=None, cliprange=None,
                    loss_normalization="sequence", normalization_constant=None, kl_beta=0.0,
                    kl_estimator="k3", ref_log_probs=None, ref_model=None,
                    sampler_log_probs=None, tis_cap=2.0, temperature=1.0):
    B = len(rollout_responses)
    terms = LossTerms(pg_method=pg_method, cliprange=cliprange, kl_beta=kl_beta,
                      kl_estimator=kl_estimator, ref_model=ref_model, tis_cap=tis_cap,
                      temperature=temperature)
    logs = dict(zip(ALIGNED_LOG_PROBS, [old_log_probs, ref_log_probs, sampler_log_probs]))
    _validate(B, repeated_prompts, repeated_ground_truths, group_size,
              gradient_accumulation_steps, loss_normalization, normalization_constant, terms, logs)
    world = rank_and_world_size()[1]
    raw, meta = compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)
    adv, adv_meta = compute_group_normalized_rewards(raw, group_size, baseline, advantage_eps,
                                                     advantage_normalizer)
    meta.update(adv_meta)
    tok = tokenize_prompt_and_output(list(repeated_prompts), list(rollout_responses), tokenizer)
    data = _aligned_batch(tok, adv, logs)
    total_rows = _sum_over_ranks(torch.tensor(B, dtype=torch.float64))
    total_tokens = _sum_over_ranks(data["response_mask"].to(torch.float64).sum())
    tracker = LossStatistics()
    optimizer.zero_grad(set_to_none=True)
    where = next(model.parameters()).device
    pieces = torch.arange(B).tensor_split(gradient_accumulation_steps)
    for i in range(len(pieces)):
        last = i == len(pieces) - 1
        with _accumulating(model, last):
            mb = _microbatch(data, pieces[i], where)
            token_loss, token_meta = per_token_step_loss(model, mb, terms)
            value = calculate_loss_and_backward(token_loss, mb["response_mask"],
                                                loss_normalization, total_rows, total_tokens,
                                                normalization_constant, world)
        _record(tracker, token_meta, mb["response_mask"], value / world)
    summary = {k: torch.tensor(v, dtype=torch.float64) for k, v in tracker.compute().items()}
    skipped = summary.pop("non_finite_losses")
    meta.update(summary)
    meta["gradient_norm"] = _clip_and_step(model, optimizer, max_grad_norm, skipped)
    meta["optimizer_step"] = 1.0
    meta["response_token_count"] = total_tokens
    return summary["loss"], meta
