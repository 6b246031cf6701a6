"""What one step of `course.loop.train` learns from a rollout batch before its update: the old,
reference and sampler log-probs with the batch's statistics (`rollout_log_probs`), which groups
carry a signal (`group_signal`, DAPO's dynamic sampling: `informative_rollouts`), and sums over
data-parallel ranks (`reduce_over_ranks`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from course.distributed import rank_and_world_size
from course.loop.filters import informative_groups, keep_groups, regroup_over_ranks, truncated_rows
from course.loop.importance import as_sampler_log_probs, importance_weights
from course.loop.rollout import RolloutBatch, score_tokens, tokenize_rollouts
from course.loop.train_config import TrainConfig
from course.metrics import compare_logprobs
from course.off_policy import estimate_kl


def reduce_over_ranks(sums: dict[str, float], maxima: dict[str, float]) -> dict[str, float]:
    """Sum `sums` and take the max of `maxima` over ranks (identity in one process)."""
    _, world_size = rank_and_world_size()
    if world_size == 1:
        return {**sums, **maxima}
    reduced = {}
    for values, op in ((sums, dist.ReduceOp.SUM), (maxima, dist.ReduceOp.MAX)):
        keys = sorted(values)
        stacked = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
        dist.all_reduce(stacked, op=op)
        reduced.update(zip(keys, stacked.tolist()))
    return reduced


def rollout_log_probs(policy, reference, tokenizer, rollouts: RolloutBatch, config: TrainConfig,
                      rescore: bool) -> tuple[dict[str, torch.Tensor | None], dict[str, float]]:
    """Old, reference and (where they correct anything) sampler log-probs (B, T), and rollout
    statistics over ranks.

    A float32 sampler of the tiny model is the policy itself, so its log-probs are the old ones (no
    extra forward). Otherwise (`rescore`: a bf16 sampler, or a real model, whose BPE tokenizer can
    re-encode a sample differently) the policy re-scores the batch; a re-encoded row keeps weight 1.
    The importance weights of `--is-level/--is-mode` (`course.loop.importance`) and the overlong
    filter reach the train step as the sampler log-probs that make its min(π_old/π_sampler, cap)
    apply them. Token means (KL to the reference, the mismatch) are global: per-rank sums over
    per-rank counts.
    """
    tokens = tokenize_rollouts(tokenizer, rollouts, retokenized="nan" if rescore else "raise")
    mask, sampler_log_probs = tokens["response_mask"], tokens["sampler_log_probs"]   # (B, T)
    # every log-prob is of softmax(z/τ), the distribution sampled at τ = config.temperature
    old_log_probs = score_tokens(policy, tokens,
                                 config.temperature) if rescore else sampler_log_probs
    retokenized = sampler_log_probs.isnan()                                          # (B, T)
    sampler_log_probs = torch.where(retokenized, old_log_probs, sampler_log_probs)
    count = float(mask.sum())
    token_means, maxima, ref_log_probs = {}, {}, None
    if reference is not None:
        ref_log_probs = score_tokens(reference, tokens, config.temperature)
        kl = estimate_kl(old_log_probs, ref_log_probs, estimator="k3")               # (B, T)
        token_means["kl_to_reference"] = float((kl * mask).sum()) / max(count, 1)
    weights = None
    if rescore:
        mismatch = compare_logprobs(sampler_log_probs, old_log_probs, mask)
        maxima["logprob_diff_max"] = mismatch.pop("logprob_diff_max")
        token_means.update(mismatch)
        token_means["retokenized_fraction"] = float((retokenized & mask.bool()).sum()) / max(count,
                                                                                             1)
        weights = importance_weights(old_log_probs, sampler_log_probs, mask, config.is_level,
                                     config.is_mode, config.tis_cap)
        changed = weights >= config.tis_cap if config.is_mode == "truncate" else weights == 0
        token_means["tis_weight_mean"] = float(weights.sum()) / max(count, 1)
        token_means["tis_capped_fraction"] = float((changed & mask.bool()).sum()) / max(count, 1)
    if config.overlong == "filter":
        kept = ~torch.tensor(truncated_rows(rollouts, tokenizer.eos_token))[:, None]  # (B, 1)
        weights = (mask.float() if weights is None else weights) * kept
        token_means["overlong_filtered_fraction"] = float((~kept * mask.bool()).sum()) / max(count,
                                                                                             1)
    sums = {key: value * count for key, value in token_means.items()}
    reduced = reduce_over_ranks({**sums, "tokens": count, "rows": float(len(rollouts))}, maxima)
    tokens_total = max(reduced.pop("tokens"), 1.0)
    stats = {key: reduced[key] / tokens_total for key in token_means}
    stats.update({key: reduced[key] for key in maxima})
    stats["response_length"] = tokens_total / reduced["rows"]
    stats["generated_tokens"] = tokens_total
    plain_tis = (
        config.is_level == "token" and config.is_mode == "truncate" and config.overlong != "filter"
    )
    if weights is not None and not plain_tis:
        sampler_log_probs = as_sampler_log_probs(old_log_probs, weights, mask)
    log_probs = {"old_log_probs": old_log_probs, "ref_log_probs": ref_log_probs,
                 "sampler_log_probs": sampler_log_probs if weights is not None else None}
    return log_probs, stats


def group_signal(rollouts: RolloutBatch, reward_fn, config: TrainConfig) -> list[bool]:
    """Per group of this rank's rollouts: True where its rewards are not all equal
    (`course.loop.filters`); a constant group has zero advantages and gives no gradient."""
    rewards = [reward_fn(response, truth)["reward"]
               for response, truth in zip(rollouts.responses, rollouts.repeated_ground_truths)]
    return informative_groups(rewards, config.group_size, config.dynamic_sampling_tolerance)


def informative_rollouts(rollouts: RolloutBatch, keep: list[bool],
                         config: TrainConfig) -> tuple[RolloutBatch, int]:
    """Dynamic sampling: this rank's share of every rank's groups where `keep` (`group_signal`),
    and how many such groups there are over all ranks."""
    return regroup_over_ranks(keep_groups(rollouts, keep, config.group_size), config.group_size)
