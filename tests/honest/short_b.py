"""Honest work #5: the short functions in a compact, expression-per-line style, as a student who
knows torch well writes them (one return per branch, `torch.special`, `masked_fill`)."""
import math

import torch


def compute_entropy(logits):
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    p = z.softmax(-1)
    return torch.special.entr(p).sum(-1)


def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
    assert len(rollout_responses) == len(repeated_ground_truths) > 0, "bad rollout lists"
    rows = [reward_fn(r, g) for r, g in zip(rollout_responses, repeated_ground_truths)]
    reward = torch.tensor([row["reward"] for row in rows], dtype=torch.float32)
    fmt = torch.tensor([row["format_reward"] for row in rows], dtype=torch.float32)
    ans = torch.tensor([row["answer_reward"] for row in rows], dtype=torch.float32)
    return reward, {"reward_mean": reward.mean().item(), "format_reward_mean": fmt.mean().item(),
                    "answer_reward_mean": ans.mean().item()}


def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                     advantage_normalizer="std"):
    g = raw_rewards.float().reshape(-1, group_size) if raw_rewards.dtype != torch.float64 \
        else raw_rewards.reshape(-1, group_size)
    std, mean = torch.std_mean(g, dim=1, keepdim=True)
    a = g - mean * (baseline == "mean")
    a = a / (std + advantage_eps) if advantage_normalizer == "std" else \
        a / (mean + advantage_eps) if advantage_normalizer == "mean" else a
    a = a.view(-1)
    return a, {"advantage_mean": a.mean().item(), "advantage_std": a.std().item()}


def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None, response_mask=None):
    d = new_logprobs.float() - ref_logprobs.float()
    off = None if response_mask is None else ~response_mask.bool()
    d = d if off is None else d.masked_fill(off, 0)
    d = d.clamp(-40, 40)
    if estimator == "ratio_k1":
        return (ratio if off is None else ratio.masked_fill(off, 0)) * d
    return {"k1": d, "k2": d.pow(2).mul(0.5), "k3": torch.special.expm1(-d).add(d)}[estimator]


def truncated_importance_weights(old_log_probs, sampler_log_probs, cap, response_mask=None):
    if not cap > 0:
        raise ValueError("cap")
    lw = (old_log_probs - sampler_log_probs).detach().float().clamp_max(math.log(cap))
    return lw.exp() if response_mask is None else lw.exp().masked_fill(~response_mask.bool(), 0)


def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                     normalization_constant=None):
    m = mask.to(per_token_policy_gradient_loss.dtype)
    x = per_token_policy_gradient_loss.masked_fill(mask == 0, 0)
    if loss_normalization == "sequence":
        return (x.sum(1) / m.sum(1).clamp_min(1)).mean()
    if loss_normalization == "constant" and normalization_constant is None:
        raise ValueError("constant needs normalization_constant")
    return x.sum() / (normalization_constant or m.sum().clamp_min(1))
