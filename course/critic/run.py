"""PPO with a learned critic and GAE on GRPO's budget, written as `course.train` writes its run.

Each step, as `course.loop.train.train` does: draw `prompts_per_step` training problems in GRPO's
order, sample `group_size` responses to each with the current policy (`course.loop.rollout`, seeded
as GRPO's, so the first batch is GRPO's first batch), score them with the task's reward
(`course.loop.tasks`). Then, where GRPO compares each response with its group, PPO asks its critic:
V_old (B, T) from the value head, the per-token rewards and GAE's advantages and returns
(`course.critic.gae`), the advantages whitened over the batch, and `updates_per_rollout` optimizer
steps of `course.critic.ppo_step` on policy and value head together.

Every step also records the per-token variance of three advantages of the SAME rollouts, all in
reward units (before any whitening or std division): GAE's A_t (`advantage_var_gae`), GRPO's
group-centered r − mean(r_group) broadcast over the response (`advantage_var_group`, Dr. GRPO's,
arXiv 2503.20783), and the bare reward r (`advantage_var_none`, no baseline at all).

`out` receives `metrics.jsonl` (one record per step; `examples` and `train_seconds` as
`course.baselines` writes them), `summary.json`, `policy.pt` and `value_head.pt`.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch

from course.advantages import compute_group_normalized_rewards, compute_rollout_rewards
from course.critic.config import CriticConfig, check
from course.critic.gae import (
    compute_gae_advantage_return,
    masked_variance,
    masked_whiten,
    outcome_token_rewards,
)
from course.critic.ppo_step import ppo_train_step
from course.critic.value import log_probs_and_values, value_head
from course.loop.models import load_model_and_tokenizer
from course.loop.progress import progress_bar
from course.loop.rollout import sample_groups, score_tokens, tokenize_rollouts
from course.loop.tasks import ADDITION
from course.loop.train import held_out_accuracy, resolve_device
from course.loop.train_config import TrainConfig

# GRPO's held-out numbers under the names of `course.loop.train.train`'s summary
ACCURACY_NAMES = {"accuracy": "heldout_accuracy_sampled",
                  "greedy_accuracy": "heldout_accuracy_greedy", "format": "heldout_format_sampled"}


def budget_line(config: TrainConfig, critic: CriticConfig) -> str:
    """The line a run prints before its first step: what it spends, and the critic's settings."""
    return (f"ppo: {config.steps * config.updates_per_rollout} optimizer steps on "
            f"{config.steps * config.prompts_per_step * config.group_size} rollouts "
            f"({config.prompts_per_step} prompts x {config.group_size} samples per step), "
            f"lr {config.lr}, γ {critic.gamma}, λ {critic.lam}, c_v {critic.vf_coef}, "
            f"ε_v {critic.value_clip}, seed {config.seed}")


def rollout_batch(policy, head, reference, tokenizer, problems: list, config: TrainConfig,
                  critic: CriticConfig, step: int) -> tuple[dict[str, torch.Tensor], dict]:
    """One step's PPO batch (`ppo_step.BATCH_KEYS`, each (B, T)) and its statistics."""
    policy.eval()
    rollouts = sample_groups(policy, tokenizer, problems, config.group_size, config.seed, step,
                             max_new_tokens=config.max_new_tokens,
                             temperature=config.temperature)
    tokens = tokenize_rollouts(tokenizer, rollouts)
    mask = tokens["response_mask"]                                                # (B, T)
    old_log_probs = tokens["sampler_log_probs"]  # the float32 sampler is the policy: its own
    device = next(policy.parameters()).device
    with torch.no_grad():
        _, old_values = log_probs_and_values(policy, head, tokens["input_ids"].to(device),
                                             tokens["labels"].to(device), config.temperature)
    old_values = old_values.float().cpu()                                         # (B, T)
    rewards, reward_stats = compute_rollout_rewards(ADDITION.reward_fn, rollouts.responses,
                                                    rollouts.repeated_ground_truths)  # (B,)
    kl = None
    if critic.kl_coef:
        kl = old_log_probs - score_tokens(reference, tokens, config.temperature)  # (B, T) k1
    token_rewards = outcome_token_rewards(rewards, mask, kl, critic.kl_coef)      # (B, T)
    advantages, returns = compute_gae_advantage_return(token_rewards, old_values, mask,
                                                       critic.gamma, critic.lam)  # (B, T) each
    centered, _ = compute_group_normalized_rewards(rewards, config.group_size, "mean",
                                                   advantage_normalizer="none")   # (B,)
    stats = {**reward_stats,
             "advantage_var_gae": masked_variance(advantages, mask),
             "advantage_var_group": masked_variance(centered[:, None].expand_as(advantages), mask),
             "advantage_var_none": masked_variance(rewards[:, None].expand_as(advantages), mask),
             "value_mean": float(torch.where(mask.bool(), old_values, 0).sum() / mask.sum()),
             "response_length": float(mask.sum()) / len(rollouts)}
    batch = {"input_ids": tokens["input_ids"], "labels": tokens["labels"], "response_mask": mask,
             "old_log_probs": old_log_probs, "old_values": old_values,
             "advantages": masked_whiten(advantages, mask), "returns": returns}
    return batch, stats


def run(config: TrainConfig, critic: CriticConfig, out: Path, progress: bool = True) -> dict:
    """Train the policy and its value head with PPO + GAE on `config`'s budget; write the run to
    `out`. Returns its summary."""
    check(config, critic)
    if progress:
        print(budget_line(config, critic), flush=True)
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    start = time.time()
    policy, tokenizer = load_model_and_tokenizer(config.checkpoint)
    policy.to(resolve_device(config.device))
    head = value_head(policy)
    reference = copy.deepcopy(policy).eval().requires_grad_(False) if critic.kl_coef else None
    optimizer = torch.optim.AdamW([*policy.parameters(), *head.parameters()], lr=config.lr,
                                  weight_decay=config.weight_decay)
    train_problems = list(ADDITION.problems("train"))
    # GRPO's problem order (`course.loop.train.train`): the same seed draws the same problems
    pool = random.Random(config.seed).sample(train_problems, len(train_problems))
    problem_rng = random.Random(config.seed)
    before = held_out_accuracy(policy, tokenizer, config)
    records, seconds = [], 0.0
    bar = progress_bar(range(1, config.steps + 1), config.steps, desc="PPO", unit="step",
                       enabled=progress)
    for step in bar:
        step_start = time.time()
        problems = problem_rng.sample(pool, config.prompts_per_step)
        batch, record = rollout_batch(policy, head, reference, tokenizer, problems, config,
                                      critic, step)
        policy.train()
        for _ in range(config.updates_per_rollout):
            record.update(ppo_train_step(
                policy, head, optimizer, batch, config.gradient_accumulation_steps,
                config.cliprange, critic.value_clip, critic.vf_coef, config.max_grad_norm,
                config.temperature))
        seconds += time.time() - step_start
        record = {"step": step, **record, "step_seconds": time.time() - step_start,
                  "examples": step * config.prompts_per_step * config.group_size,
                  "train_seconds": seconds}
        if config.eval_every and step % config.eval_every == 0 and step < config.steps:
            record.update(held_out_accuracy(policy, tokenizer, config))
        records.append(record)
        bar.set_postfix(reward=f"{record['reward_mean']:.2f}",
                        value_loss=f"{record['value_loss']:.3f}")
    after = held_out_accuracy(policy, tokenizer, config)
    if records:
        records[-1].update(after)
    summary = {"method": "ppo", "optimizer_steps": config.steps * config.updates_per_rollout,
               "examples": config.steps * config.prompts_per_step * config.group_size,
               **{f"{name}_{when}": values[key] for name, key in ACCURACY_NAMES.items()
                  for when, values in (("before", before), ("after", after))},
               "wall_seconds": time.time() - start,
               "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} "
                          f"CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads",
               "config": asdict(config), "critic": asdict(critic)}
    _write_run(out, records, summary, policy, head)
    return summary


def _write_run(out: Path, records: list[dict], summary: dict, policy, head) -> None:
    """`metrics.jsonl`, `summary.json`, `policy.pt` and `value_head.pt` in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    torch.save({k: v.cpu() for k, v in policy.state_dict().items()}, out / "policy.pt")
    torch.save({k: v.cpu() for k, v in head.state_dict().items()}, out / "value_head.pt")
