"""Honest work #4: the short functions again, as a student who checks every input first and
names every intermediate (einsum, explicit loops over estimators, float64 throughout)."""
import math

import torch


def compute_entropy(logits):
    if logits.dim() == 0 or logits.size(-1) == 0:
        raise ValueError("logits need a vocabulary axis")
    work = logits.double() if logits.dtype == torch.float64 else logits.float()
    log_probs = work - work.logsumexp(-1, keepdim=True)
    probs = log_probs.exp()
    plogp = torch.einsum("...v,...v->...", probs, log_probs)
    return (-plogp).to(logits.dtype if logits.dtype in (torch.float32, torch.float64)
                       else torch.float32)


def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
    n = len(rollout_responses)
    if n == 0:
        raise ValueError("no rollouts to score")
    if n != len(repeated_ground_truths):
        raise ValueError(f"{n} responses, {len(repeated_ground_truths)} ground truths")
    totals = {"reward": 0.0, "format_reward": 0.0, "answer_reward": 0.0}
    rewards = torch.empty(n, dtype=torch.float32)
    for i, (response, truth) in enumerate(zip(rollout_responses, repeated_ground_truths)):
        info = reward_fn(response, truth)
        rewards[i] = float(info["reward"])
        for key in totals:
            totals[key] += float(info[key])
    return rewards, {key + "_mean": value / n for key, value in totals.items()}


def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                     advantage_normalizer="std"):
    total = len(raw_rewards)
    if group_size < 1 or total == 0 or total % group_size != 0:
        raise ValueError(f"cannot split {total} rewards into groups of {group_size}")
    if advantage_normalizer == "std" and group_size == 1:
        raise ValueError("std is undefined for one sample")
    dtype = raw_rewards.dtype if raw_rewards.dtype == torch.float64 else torch.float32
    out = []
    for group in raw_rewards.to(dtype).split(group_size):
        average = group.sum() / group_size
        spread = torch.sqrt(((group - average) ** 2).sum() / max(group_size - 1, 1))
        numerator = group - average if baseline == "mean" else group
        if advantage_normalizer == "std":
            denominator = spread + advantage_eps
        elif advantage_normalizer == "mean":
            denominator = average + advantage_eps
        else:
            denominator = torch.ones((), dtype=dtype)
        out.append(numerator / denominator)
    advantages = torch.cat(out)
    return advantages, {"advantage_mean": advantages.mean().item(),
                        "advantage_std": advantages.std().item() if total > 1 else 0.0}


def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None, response_mask=None):
    if new_logprobs.shape != ref_logprobs.shape:
        raise ValueError("new_logprobs and ref_logprobs differ in shape")
    delta = new_logprobs.to(torch.float64 if new_logprobs.dtype == torch.float64
                            else torch.float32) - ref_logprobs
    if response_mask is not None:
        delta = delta * response_mask.to(delta.dtype)
        delta = torch.nan_to_num(delta, nan=0.0, posinf=0.0, neginf=0.0)
    delta = torch.clip(delta, min=-40.0, max=40.0)
    if estimator == "k1":
        kl = delta
    elif estimator == "k2":
        kl = delta * delta * 0.5
    elif estimator == "k3":
        kl = torch.exp(-delta) - 1.0 + delta
    elif estimator == "ratio_k1":
        if ratio is None:
            raise ValueError("ratio_k1 needs ratio")
        weight = ratio if response_mask is None else ratio * response_mask
        kl = weight * delta
    else:
        raise ValueError(f"unknown KL estimator {estimator!r}")
    return kl


def truncated_importance_weights(old_log_probs, sampler_log_probs, cap, response_mask=None):
    if isinstance(cap, bool) or not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap!r}")
    limit = math.log(cap)
    out = torch.zeros_like(old_log_probs, dtype=torch.float32 if old_log_probs.dtype
                           in (torch.float16, torch.bfloat16) else old_log_probs.dtype)
    keep = torch.ones_like(out, dtype=torch.bool) if response_mask is None else \
        response_mask.bool()
    log_w = (old_log_probs.detach() - sampler_log_probs.detach()).to(out.dtype)
    out[keep] = torch.exp(torch.minimum(log_w[keep], torch.full_like(log_w[keep], limit)))
    return out


def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                     normalization_constant=None):
    loss, m = per_token_policy_gradient_loss, mask.bool()
    if loss.shape != m.shape:
        raise ValueError("mask and loss must match")
    if normalization_constant is not None and normalization_constant <= 0:
        raise ValueError("normalization_constant must be positive")
    kept = loss.masked_fill(~m, 0.0)
    if loss_normalization == "sequence":
        counts = m.sum(dim=-1).clamp(min=1)
        return torch.mean(kept.sum(dim=-1) / counts)
    elif loss_normalization == "token":
        n = m.sum().clamp(min=1) if normalization_constant is None else normalization_constant
        return kept.sum() / n
    elif loss_normalization == "constant" and normalization_constant is not None:
        return kept.sum() / normalization_constant
    raise ValueError(f"bad loss_normalization {loss_normalization!r} or missing constant")
