"""End-to-end GRPO: the course's stages, assembled into a loop that learns on a laptop CPU.

    python -m course.train --out runs/grpo                      # one process
    torchrun --nproc_per_node 2 -m course.train --out runs/dp   # data parallel (gloo on CPU)

Each step: draw `prompts_per_step` training problems, sample `group_size` responses to each with
the current policy (`course.loop.rollout`), score old / reference log-probs, and take
`updates_per_rollout` optimizer steps with `course.grpo_train_step` (rewards → group advantages →
per-token loss → normalization → backward → clip → step). GRPO is Shao et al. 2024 (arXiv
2402.03300); the loss variants and normalizations are those of `course.losses` and
`course.aggregation`. The policy starts from the shipped supervised warm start
(`course/checkpoints/warm_start`, made by `python -m course.loop.warm_start`), because RL sharpens
what a policy can already sometimes do.

Under `torchrun`, every rank draws the same problems and keeps whole groups of its own; sampling is
seeded per row (`rollout.row_seed`), so the rollouts, and therefore the updates, are those of the
single-process run. `--out DIR` writes `metrics.jsonl` (one record per step), `summary.json`,
`training_curves.png` and the final weights `policy.pt` (a DIR that holds a run is refused unless
`--overwrite`; a Ctrl-C ends with the steps done, which `metrics.jsonl` holds). `--notebooks DIR`
trains with the learner's own stages, read from their notebooks
(`course.submissions.implementations`): their train step on their tokenizer, scorer, advantages,
losses and aggregation, each falling back to the reference where it is not written yet. In a student
edition that has not revealed every stage, the default is the edition's own `notebooks/`.

What the defaults reach, and in how long, is measured in `benchmarks/README.md` ("End to end",
`benchmarks/bench_train.py`).
`python -m course.lab.compare` runs the loss variants side by side.
`course.loop.step_arguments` turns a config into the train step's loss and advantage arguments;
`course.loop.rollout_scores` scores a rollout batch before the update.

A real model: `--model DIR` loads any Hugging Face causal LM (`course.loop.models.load_pretrained`;
a hub id only with `--allow-download`), `--task gsm8k --data FILE` trains it on GSM8K-format
problems (`course.loop.gsm8k`). The knobs of 2026 trainers: `--dynamic-sampling`
(`course.loop.filters`), `--overlong filter|soft`, `--is-level`/`--is-mode`
(`course.loop.importance`), `--entropy-coef` (`course.loop.entropy_bonus`); `docs/real_models.md`.
The losses of 2025–26 (`course.frontier.loss`): `--pg-method sapo|gmpo|dppo`, `--dual-clip`,
`--cispo-floor`, `--ratio-against sampler`, `--outlier-low/--outlier-high`; MaxRL's guard
(`course.frontier.maxrl`) with `--advantage-normalizer mean`. Stage 3's ungraded options
(`course.advantages`): RLOO's `--baseline leave_one_out`, REINFORCE++'s `--advantage-normalizer
batch` (with `--baseline mean`: REINFORCE++-baseline), measured in `benchmarks/README.md`.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import platform
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from course.distributed import rank_and_world_size
from course.frontier.maxrl import refuse_negative_rewards
from course.loop.entropy_bonus import train_step_with_entropy_bonus
from course.loop.filters import with_soft_overlong_penalty
from course.loop.gsm8k import GSM8KTask, load_gsm8k_jsonl, load_hub_gsm8k
from course.loop.models import (
    add_lora,
    enable_gradient_checkpointing,
    load_model_and_tokenizer,
    load_pretrained,
)
from course.loop.plotting import plot_training_curves
from course.loop.progress import progress_bar
from course.loop.rollout import RolloutBatch, evaluate, sample_groups
from course.loop.rollout_scores import (
    group_signal,
    informative_rollouts,
    reduce_over_ranks,
    rollout_log_probs,
)
from course.loop.step_arguments import (
    advantage_arguments,
    advantage_option_problem,
    loss_arguments,
)
from course.loop.tasks import ADDITION, Task

# re-exported: `from course.loop.train import TrainConfig, train`
from course.loop.train_config import (
    RUN_FILES,
    WARM_START,
    ConfigError,
    TrainConfig,
    frontier_field,
    frontier_loss_problem,
    grpo_loss_problem,
    temperature_problem,
    validate,
)
from course.submissions.implementations import Implementations
from course.train_step import grpo_train_step

__all__ = ["WARM_START", "TrainConfig", "train", "validate"]

# The held-out problems and their sampling noise are fixed, so every run is measured on the same
# test.
EVAL_SEED = 1
REWARD_KEYS = ("reward_mean", "format_reward_mean", "answer_reward_mean")


def resolve_device(device: str) -> str:
    """`auto` is cuda where torch sees a GPU, else cpu; anything else is itself."""
    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def load_task(config: TrainConfig, tokenizer) -> Task:
    """The task of `config`: the synthetic addition, or GSM8K-format problems from --data."""
    if config.task == "addition":
        return ADDITION
    is_file = Path(config.data).is_file()
    problems = load_gsm8k_jsonl(config.data) if is_file else load_hub_gsm8k(config.data,
                                                                            config.allow_download)
    task = GSM8KTask(problems, tokenizer)
    for split in ("train", "test"):
        if not task.problems(split):
            raise ConfigError("data", f"{config.data!r} leaves no {split} problems (its held-out "
                                      "20% is "
                              "chosen by question hash): give more problems")
    return task


def load_policy(config: TrainConfig):
    """(policy, tokenizer): --model through AutoModelForCausalLM, else the tiny --checkpoint;
    with gradient checkpointing, LoRA and the chunked head as configured."""
    if not config.model:
        policy, tokenizer = load_model_and_tokenizer(config.checkpoint)
    else:
        policy, tokenizer = load_pretrained(config.model, config.model_dtype, config.allow_download)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
    if config.logits_chunk_size:
        policy.config.grpo_logits_chunk_size = config.logits_chunk_size
    if config.lora_rank:
        policy = add_lora(policy, config.lora_rank)
    return policy, tokenizer


def held_out_accuracy(model, tokenizer, config: TrainConfig, task: Task = ADDITION) -> dict[str,
                                                                                            float]:
    """Answer accuracy on the held-out problems: sampled at temperature 1, and greedy."""
    test = list(task.problems("test"))
    problems = random.Random(EVAL_SEED).sample(test, min(config.eval_problems, len(test)))
    sampled = evaluate(model, tokenizer, problems, seed=EVAL_SEED,
                       samples_per_problem=config.eval_samples,
                       max_new_tokens=config.max_new_tokens, task=task)
    greedy = evaluate(model, tokenizer, problems, seed=None, max_new_tokens=config.max_new_tokens,
                      task=task)
    return {"heldout_accuracy_sampled": sampled["answer_reward"],
            "heldout_format_sampled": sampled["format_reward"],
            "heldout_accuracy_greedy": greedy["answer_reward"]}


@dataclass
class Run:
    """What the steps of one run share: the models, the optimizer, the task and the train step."""

    config: TrainConfig
    train_step: Callable
    policy: torch.nn.Module
    tokenizer: object
    task: Task
    reward_fn: Callable
    reference: torch.nn.Module | None  # π_ref: the starting policy, frozen
    sampler: torch.nn.Module  # the policy, or its bf16 copy (--sampler-dtype)
    model: torch.nn.Module  # the policy, in DistributedDataParallel under torchrun
    optimizer: torch.optim.Optimizer
    rescore: bool  # the sampler's log-probs are not π_old's: score the batch again
    rank: int
    world_size: int


def checked_train_step(config: TrainConfig, implementations: Implementations | None,
                       world_size: int) -> Callable:
    """The train step that takes the optimizer steps (the learner's, or the reference's), once
    `config` and what that step can train with are checked (ConfigError); with the entropy bonus."""
    train_step = implementations["grpo_train_step"] if implementations else grpo_train_step
    validate(config, world_size)
    if problem := temperature_problem(train_step):
        raise ConfigError("temperature", problem)
    if problem := grpo_loss_problem(train_step, config.pg_method):
        raise ConfigError("pg_method", problem)
    if problem := frontier_loss_problem(train_step, config):
        raise ConfigError(frontier_field(config), problem)
    # a learner's stage 3, where their set has one (a lab run may bring only its train step)
    stage_three = implementations.get("compute_group_normalized_rewards") \
        if implementations else None
    if stage_three and (problem := advantage_option_problem(stage_three, config, world_size)):
        raise ConfigError(*problem)
    if config.entropy_coef:
        train_step = functools.partial(train_step_with_entropy_bonus, train_step,
                                       entropy_coef=config.entropy_coef)
    return train_step


def start_run(config: TrainConfig, train_step: Callable, task: Task | None) -> Run:
    """Seed torch, load the policy and its task, copy the reference and the sampler, and build
    the optimizer (of the LoRA adapters only, with LoRA)."""
    rank, world_size = rank_and_world_size()
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    policy, tokenizer = load_policy(config)
    policy.to(resolve_device(config.device))
    task = load_task(config, tokenizer) if task is None else task
    reward_fn = task.reward_fn
    if config.overlong == "soft":
        reward_fn = with_soft_overlong_penalty(reward_fn, tokenizer, config.max_new_tokens,
                                               config.overlong_buffer)
    if config.advantage_normalizer == "mean":  # MaxRL: rewards below 0 are refused as they come
        reward_fn = refuse_negative_rewards(reward_fn)
    # the tiny model always keeps its starting point (the KL panel); a real one only for the KL
    # penalty
    needs_reference = config.kl_beta > 0 or not config.model
    reference = copy.deepcopy(policy).eval().requires_grad_(False) if needs_reference else None
    separate_sampler = config.sampler_dtype != "float32"
    sampler = copy.deepcopy(policy).to(torch.bfloat16).eval() if separate_sampler else policy
    model = torch.nn.parallel.DistributedDataParallel(policy) if world_size > 1 else policy
    trained = [p for p in policy.parameters() if p.requires_grad]  # LoRA: the adapters only
    optimizer = torch.optim.AdamW(trained, lr=config.lr, weight_decay=config.weight_decay)
    return Run(config, train_step, policy, tokenizer, task, reward_fn, reference, sampler, model,
               optimizer, separate_sampler or bool(config.model), rank, world_size)


def problem_pool(config: TrainConfig, task: Task) -> list:
    """The training problems in the run's order (ConfigError when a step would need more)."""
    train_problems = list(task.problems("train"))
    if len(train_problems) < config.prompts_per_step:
        raise ConfigError("prompts_per_step", f"({config.prompts_per_step}) must be at most the "
                          f"{len(train_problems)} training problems of --task {config.task}")
    return random.Random(config.seed).sample(train_problems, len(train_problems))


def train(config: TrainConfig, out: Path | None = None, progress: bool = True,
          implementations: Implementations | None = None, task: Task | None = None) -> dict:
    """Run GRPO with `config`; write metrics, summary and plots to `out`. Returns the summary.
    `implementations`: whose graded functions take the optimizer step (default: the reference's).
    `task`: what to train on instead of `config.task`'s (its `reward` trains, its `answer_reward`
    is the held-out accuracy; `course.lab.failure_runs` passes a reward with a loophole)."""
    train_step = checked_train_step(config, implementations, rank_and_world_size()[1])
    start = time.time()
    run = start_run(config, train_step, task)
    pool, problem_rng = problem_pool(config, run.task), random.Random(config.seed)
    rank = run.rank
    records: list[dict] = []
    before = held_out_accuracy(run.policy, run.tokenizer, config, run.task) if rank == 0 else {}
    metrics_file = None
    if out is not None and rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        for name in RUN_FILES:  # an earlier run's (--overwrite): no stale plot beside new metrics
            (out / name).unlink(missing_ok=True)
        metrics_file = open(out / "metrics.jsonl", "w")
    bar = progress_bar(range(1, config.steps + 1), config.steps, desc="GRPO", unit="step",
                       enabled=progress and rank == 0)
    try:
        for step in bar:
            drawn = problem_rng.sample(pool, config.prompts_per_step)
            record = rollout_and_update(run, step, drawn)
            if rank != 0:
                continue
            records.append(record)
            if "skipped_update" in record:
                continue
            if config.eval_every and step % config.eval_every == 0 and step < config.steps:
                record.update(held_out_accuracy(run.policy, run.tokenizer, config, run.task))
            if metrics_file:
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
            bar.set_postfix(reward=f"{record['reward_mean']:.2f}",
                            entropy=f"{record['token_entropy']:.2f}")
    except KeyboardInterrupt:  # Ctrl-C: stop at once, and say what was done (`result_text`)
        if metrics_file:
            metrics_file.close()
        return {"interrupted": True, "steps_done": len(records), "steps": config.steps,
                "wall_seconds": time.time() - start} if rank == 0 else {}
    if rank != 0:
        return {}
    if metrics_file:
        metrics_file.close()
    return finish_run(run, records, before, start, out, implementations)


def rollout_and_update(run: Run, step: int, drawn: list) -> dict:
    """One step: sample this rank's share of the `drawn` problems, score them, take the
    optimizer steps; the step's record (`{"skipped_update": 1.0, ...}` when dynamic sampling
    left too few groups for every rank)."""
    config, rank, world_size = run.config, run.rank, run.world_size
    step_start = time.time()
    per_rank = config.prompts_per_step // world_size
    problems = drawn[rank * per_rank:(rank + 1) * per_rank]
    if run.sampler is not run.policy:
        run.sampler.load_state_dict(run.policy.state_dict())
    run.policy.eval()
    rollouts = sample_groups(run.sampler, run.tokenizer, problems, config.group_size, config.seed,
                             step, first_index=rank * per_rank,
                             max_new_tokens=config.max_new_tokens,
                             temperature=config.temperature, task=run.task)
    kept_groups, signal = None, group_signal(rollouts, run.reward_fn, config)
    groups_with_signal = reduce_over_ranks({"signal": sum(signal), "groups": len(signal)}, {})
    if config.dynamic_sampling:
        rollouts, kept_groups = informative_rollouts(rollouts, signal, config)
        if kept_groups < world_size:  # too few groups left for every rank: no update this step
            return {"step": step, "kept_groups": kept_groups, "skipped_update": 1.0}
    log_probs, stats = rollout_log_probs(run.policy, run.reference, run.tokenizer, rollouts, config,
                                         run.rescore)
    run.policy.train()
    metadata = update(run, rollouts, log_probs)
    # The train step's statistics are per rank for rewards (equal row counts: mean of means).
    # (rows differ between ranks after dynamic sampling: weigh each rank's means by its rows)
    groups = config.prompts_per_step if kept_groups is None else kept_groups
    rows = float(len(rollouts)) * world_size / (groups * config.group_size)
    rewards = reduce_over_ranks({k: metadata[k] * rows / world_size for k in REWARD_KEYS}, {})
    seconds = time.time() - step_start
    generated_tokens = stats.pop("generated_tokens")
    if kept_groups is not None:
        stats["kept_groups"] = kept_groups
    stats["groups_with_signal"] = groups_with_signal["signal"] / groups_with_signal["groups"]
    return {"step": step, **stats, **rewards,
            "token_entropy": float(metadata["token_entropy"]),
            **({"entropy_bonus": metadata["entropy_bonus"]} if config.entropy_coef else {}),
            "clip_fraction": float(metadata.get("clip_fraction", 0.0)),
            # stage 3's metadata of this rank's rows (all of them on one process)
            "advantage_std": float(metadata.get("advantage_std", float("nan"))),
            "gradient_norm": float(metadata["gradient_norm"]),
            "loss": float(metadata["loss"]),
            "tokens_per_second": generated_tokens / seconds,
            "step_seconds": seconds}


def update(run: Run, rollouts: RolloutBatch, log_probs: dict) -> dict:
    """`updates_per_rollout` optimizer steps of the train step on one rollout batch; the last
    step's metadata."""
    config = run.config
    constant = (config.normalization_constant or config.prompts_per_step * config.group_size
                * config.max_new_tokens) if config.normalization == "constant" else None
    needs_old = config.pg_method != "none"
    for _ in range(config.updates_per_rollout):
        _, metadata = run.train_step(
            run.model, run.tokenizer, run.optimizer,
            min(config.gradient_accumulation_steps, len(rollouts)),
            config.max_grad_norm or None, run.reward_fn, rollouts.repeated_prompts,
            rollouts.responses, rollouts.repeated_ground_truths, config.group_size,
            **advantage_arguments(config),
            old_log_probs=log_probs["old_log_probs"] if needs_old else None,
            loss_normalization=config.normalization, normalization_constant=constant,
            **loss_arguments(config),
            ref_log_probs=log_probs["ref_log_probs"] if config.kl_beta > 0 else None,
            sampler_log_probs=log_probs["sampler_log_probs"], tis_cap=config.tis_cap,
            temperature=config.temperature,
        )
    return metadata


def finish_run(run: Run, records: list[dict], before: dict, start: float, out: Path | None,
               implementations: Implementations | None) -> dict:
    """Rank 0 after the last step: the final evaluation, the summary, and (with `out`) the
    metrics, summary, curves and weights written."""
    config = run.config
    after = held_out_accuracy(run.policy, run.tokenizer, config, run.task)
    if records:
        records[-1].update(after)
    summary = {
        "accuracy_before": before["heldout_accuracy_sampled"],
        "accuracy_after": after["heldout_accuracy_sampled"],
        "greedy_accuracy_before": before["heldout_accuracy_greedy"],
        "greedy_accuracy_after": after["heldout_accuracy_greedy"],
        "format_before": before["heldout_format_sampled"],
        "format_after": after["heldout_format_sampled"],
        "wall_seconds": time.time() - start,
        "world_size": run.world_size,
        "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, "
                   f"torch {torch.__version__}, {torch.get_num_threads()} threads/process",
        "config": asdict(config),
        "implementations": implementations.origins if implementations else "reference",
    }
    if out is not None:
        if records:
            # rewrite so that the last record carries the final evaluation too
            (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        plot_training_curves(records, before, out / "training_curves.png")
        torch.save({k: v.cpu() for k, v in run.policy.state_dict().items()}, out / "policy.pt")
    return summary


RUN_FILE_ROLES = dict(zip(RUN_FILES, ("one record per step", "these numbers, the config and the "
                                                             "machine",
                                      "reward, accuracy, entropy and KL over the steps",
                                      "the trained weights")))


def result_text(summary: dict, out: Path | None) -> str:
    """A run's result as its command line prints it: held-out accuracy before and after, the files
    written and what to open next; or, for a run stopped by Ctrl-C, the steps done and what of
    them `out` holds."""
    seconds = f"{summary['wall_seconds']:.0f} s"
    if summary.get("interrupted"):
        lines = [f"interrupted (Ctrl-C) after {summary['steps_done']} of {summary['steps']} steps, "
                 f"{seconds}: no final evaluation, no summary.json, plot or policy.pt"]
        if out is not None and summary["steps_done"]:
            lines.append(f"partial: {out / 'metrics.jsonl'} holds the {summary['steps_done']} "
                         "steps "
                         "done; a new run there needs --overwrite")
        return "\n".join(lines)
    origin = (
        "the reference's stages" if summary["implementations"] == "reference" else "your stages"
    )
    rows = [("sampled at τ = 1", "accuracy"), ("greedy", "greedy_accuracy"),
            ("format (sampled)", "format")]
    lines = [f"GRPO: {summary['config']['steps']} steps in {seconds} with {origin}",
             f"{'held-out answer accuracy':<28}{'before':<10}after"]
    lines += [f"  {label:<24}  {summary[key + '_before']:.3f}  →  {summary[key + '_after']:.3f}"
              for label, key in rows]
    if out is None:
        lines.append("nothing written: --out DIR keeps the metrics, the curves and the weights")
        return "\n".join(lines)
    lines.append(f"wrote {out}/")
    lines += [f"  {name:<20} {role}" for name, role in RUN_FILE_ROLES.items()]
    lines.append(f"next: open {out / 'training_curves.png'}; `python -m course.lab.compare` trains "
                 "the "
                 "loss variants side by side")
    return "\n".join(lines)


def run_distributed(config: TrainConfig, out: Path | None, implementations: Implementations | None,
                    world_size: int) -> dict:
    """`train` in one process, or as one rank of `world_size` under torchrun (gloo)."""
    if world_size == 1:
        return train(config, out, implementations=implementations)
    dist.init_process_group("gloo")
    try:
        summary = train(config, out, implementations=implementations)
        dist.barrier()  # no rank tears gloo down while another is still communicating
    finally:
        dist.destroy_process_group()
    return summary
