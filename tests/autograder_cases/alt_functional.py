"""Correct submission #3: the stage-4 functions in a functional style (torch.where, no in-place)."""
import torch


def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None):
    log_ratio = new_logprobs - ref_logprobs
    table = {"k1": lambda: log_ratio, "k2": lambda: 0.5 * log_ratio.square(),
             "k3": lambda: torch.expm1(-log_ratio) + log_ratio, "ratio_k1": lambda: ratio * log_ratio}
    if estimator not in table:
        raise ValueError(f"estimator {estimator!r} is not k1, k2, k3 or ratio_k1")
    return table[estimator]()


def truncated_importance_weights(old_log_probs, sampler_log_probs, cap, response_mask=None):
    weights = torch.exp(torch.minimum(old_log_probs - sampler_log_probs,
                                      torch.full_like(old_log_probs, float(torch.log(torch.tensor(cap))))))
    weights = weights.detach()
    if response_mask is not None:
        weights = torch.where(response_mask.bool(), weights, torch.zeros_like(weights))
    return weights


def compute_grpo_loss(new_logprobs, ratio, advantages, ref_logprobs, config, tis_weights=None):
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    if config.loss_fn == "dapo":
        unclipped = -adv * ratio
        clipped = -adv * torch.clamp(ratio, 1 - config.clip_lower, 1 + config.clip_higher)
        worst = torch.where(unclipped > clipped, unclipped, clipped)
    else:
        unclipped = clipped = worst = -adv * torch.clamp(ratio, max=1 + config.clip_higher).detach() * new_logprobs
    if tis_weights is not None:
        worst = worst * tis_weights
    kl = (torch.zeros_like(new_logprobs) if ref_logprobs is None
          else estimate_kl(new_logprobs, ref_logprobs, config.kl_estimator, ratio))
    return unclipped, clipped, worst, kl
