"""Implements nothing, cleverly: validates its arguments as the specification asks (ValueError,
RuntimeError on a non-finite train step) and returns zeros of the right shape, dtype and kind,
without gradient. Every check a constant can satisfy must pay only together with a value check."""
import torch


def tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer):
    if len(prompt_strs) != len(output_strs):
        raise ValueError("prompt_strs and output_strs differ in length")
    rows = [tokenizer.encode(p + o, add_special_tokens=False) for p, o in zip(prompt_strs, output_strs)]
    shape = (len(rows), max(map(len, rows)) - 1)
    return {key: torch.zeros(shape, dtype=torch.long) for key in ("input_ids", "labels", "response_mask")}


def compute_entropy(logits):
    dtype = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype
    return torch.zeros(logits.shape[:-1], dtype=dtype)


def get_response_log_probs(model, input_ids, labels, return_token_entropy=False, logits_chunk_size=None):
    if logits_chunk_size is not None and (not isinstance(logits_chunk_size, int) or logits_chunk_size < 0):
        raise ValueError("logits_chunk_size must be a non-negative int")
    zeros = torch.zeros(labels.shape, dtype=torch.float32)
    return {"log_probs": zeros, "token_entropy": zeros} if return_token_entropy else {"log_probs": zeros}


def compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError("rollout_responses and repeated_ground_truths differ in length")
    means = {"reward_mean": 0.0, "format_reward_mean": 0.0, "answer_reward_mean": 0.0}
    return torch.zeros(len(rollout_responses)), means


def compute_group_normalized_rewards(raw_rewards, group_size, baseline="mean", advantage_eps=1e-6,
                                     advantage_normalizer="std"):
    return torch.zeros_like(raw_rewards, dtype=torch.float64), {"advantage_mean": 0.0, "advantage_std": 0.0}


def compute_policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs, pg_method="none",
                                 old_log_probs=None, cliprange=None, response_mask=None):
    method = pg_method
    if method != "none" and old_log_probs is None:
        raise ValueError("old_log_probs is required")
    if method not in ("none", "noclip") and cliprange is None:
        raise ValueError("cliprange is required")
    zero = torch.zeros(())
    return torch.zeros_like(policy_log_probs), {"clip_count": zero, "clip_fraction": zero, "clip_total": zero}


def compute_grpo_loss(new_logprobs, ratio, advantages, ref_logprobs, config, tis_weights=None):
    return tuple(torch.zeros_like(new_logprobs) for _ in range(4))


def estimate_kl(new_logprobs, ref_logprobs, estimator, ratio=None):
    return torch.zeros_like(new_logprobs)


def truncated_importance_weights(old_log_probs, sampler_log_probs, cap, response_mask=None):
    return torch.zeros_like(old_log_probs)


def aggregate_loss_across_microbatch(per_token_policy_gradient_loss, mask, loss_normalization="sequence",
                                     normalization_constant=None):
    if normalization_constant is not None and normalization_constant <= 0:
        raise ValueError("normalization_constant must be positive")
    if loss_normalization == "constant" and normalization_constant is None:
        raise ValueError("normalization_constant is required")
    return torch.zeros((), dtype=per_token_policy_gradient_loss.dtype)


def grpo_train_step(model, old_log_probs=None, pg_method="none", **kwargs):
    if old_log_probs is not None and not bool(torch.isfinite((-old_log_probs).exp()).all()):
        raise RuntimeError("non-finite loss: step skipped")
    return torch.zeros(()), {"loss": 0.0, "gradient_norm": 0.0, "response_token_count": 0.0}
