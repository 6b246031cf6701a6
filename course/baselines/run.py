"""One run of SFT, expert iteration or GRPO on a matched budget, written as `course.train` writes
its run.

The budget (`course.baselines.budget`) is the same for the three methods. The task
(`course.loop.tasks.ADDITION`), the warm start (`config.checkpoint`), the learning rate, the
gradient clip and the held-out test (`course.loop.train.held_out_accuracy`) are GRPO's. GRPO is
`course.loop.train.train` itself; the other two take AdamW steps of `course.baselines.sft`.

`out` receives `metrics.jsonl` (one record per step) and `summary.json`, as `course.train`'s run,
and `policy.pt`; every record also holds `examples` (the budget spent so far) and `train_seconds`
(the steps' wall time so far, held-out evaluations left out), the two axes a comparison plots
held-out accuracy against.
"""

from __future__ import annotations

import json
import os
import platform
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch

from course.baselines.budget import budget, budget_line, check
from course.baselines.expert_iteration import expert_samples
from course.baselines.sft import demonstrations, sft_train_step
from course.loop.models import load_model_and_tokenizer
from course.loop.progress import progress_bar
from course.loop.tasks import ADDITION
from course.loop.train import held_out_accuracy, resolve_device, train
from course.loop.train_config import RUN_FILES, TrainConfig


def run(method: str, config: TrainConfig, out: Path, progress: bool = True) -> dict:
    """Train `method` on `config`'s budget; write the run to `out`. Returns its summary."""
    check(method, config)
    if progress:
        print(budget_line(method, config), flush=True)
    if method == "grpo":
        summary = train(config, out, progress=progress)
        if summary.get("interrupted"):  # Ctrl-C: the trainer's partial metrics.jsonl, no summary
            return summary
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        summary = {**summary, "method": method, **budget(method, config)}
        _write_run(out, _with_axes(records, config), summary)
        return summary
    return _imitate(method, config, out, progress)


def _with_axes(records: list[dict], config: TrainConfig) -> list[dict]:
    """`records` with `examples` and `train_seconds` (cumulative `step_seconds`) added."""
    seconds = 0.0
    for record in records:
        seconds += record.get("step_seconds", 0.0)
        record["examples"] = record["step"] * config.prompts_per_step * config.group_size
        record["train_seconds"] = seconds
    return records


def _step_data(method: str, policy, tokenizer, problem_rng: random.Random, pool: list,
               config: TrainConfig, step: int) -> tuple[list[str], list[str], dict[str, float]]:
    """One step's (prompts, responses) to imitate, and what to log about them."""
    if method == "sft":
        problems = problem_rng.sample(pool, config.prompts_per_step * config.group_size)
        prompts, responses = demonstrations(problems, tokenizer.eos_token)
        return prompts, responses, {}
    problems = problem_rng.sample(pool, config.prompts_per_step)
    prompts, responses, rollouts = expert_samples(
        policy, tokenizer, problems, config.group_size, config.seed, step,
        config.max_new_tokens, config.temperature)
    kept = {"kept": float(len(prompts)), "reward_mean": len(prompts) / len(rollouts)}
    return prompts, responses, kept


def _imitate(method: str, config: TrainConfig, out: Path, progress: bool) -> dict:
    """SFT or expert iteration: each step, the step's data, then `updates_per_rollout` SFT steps."""
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    start = time.time()
    policy, tokenizer = load_model_and_tokenizer(config.checkpoint)
    policy.to(resolve_device(config.device)).train()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr,
                                  weight_decay=config.weight_decay)
    train_problems = list(ADDITION.problems("train"))
    # GRPO's problem order (`course.loop.train.train`): the same seed draws the same problems
    pool = random.Random(config.seed).sample(train_problems, len(train_problems))
    problem_rng = random.Random(config.seed)
    before = held_out_accuracy(policy, tokenizer, config)
    records = []
    bar = progress_bar(range(1, config.steps + 1), config.steps, desc=method, unit="step",
                       enabled=progress)
    for step in bar:
        step_start = time.time()
        prompts, responses, record = _step_data(method, policy, tokenizer, problem_rng, pool,
                                                config, step)
        record = {"step": step, **record, "skipped_update": float(not prompts)}
        for _ in range(config.updates_per_rollout if prompts else 0):
            accumulation = min(config.gradient_accumulation_steps, len(prompts))
            record.update(sft_train_step(policy, tokenizer, optimizer, prompts, responses,
                                         accumulation, config.max_grad_norm))
        record["step_seconds"] = time.time() - step_start
        if config.eval_every and step % config.eval_every == 0 and step < config.steps:
            record.update(held_out_accuracy(policy, tokenizer, config))
        records.append(record)
        bar.set_postfix(loss=f"{record.get('loss', float('nan')):.3f}",
                        **({"kept": int(record["kept"])} if "kept" in record else {}))
    after = held_out_accuracy(policy, tokenizer, config)
    if records:
        records[-1].update(after)
    summary = {"method": method, **budget(method, config), **_accuracies(before, after),
               "wall_seconds": time.time() - start, "world_size": 1, "machine": _machine(),
               "config": asdict(config), "implementations": "reference"}
    _write_run(out, _with_axes(records, config), summary)
    torch.save({k: v.cpu() for k, v in policy.state_dict().items()}, out / "policy.pt")
    return summary


def _accuracies(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The held-out numbers of `course.loop.train.train`'s summary, under its names."""
    names = {"accuracy": "heldout_accuracy_sampled", "greedy_accuracy": "heldout_accuracy_greedy",
             "format": "heldout_format_sampled"}
    return {f"{name}_{when}": values[key] for name, key in names.items()
            for when, values in (("before", before), ("after", after))}


def _machine() -> str:
    return (f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads/process")


def _write_run(out: Path, records: list[dict], summary: dict) -> None:
    """`metrics.jsonl` and `summary.json` in `out` (an earlier run's files there go first)."""
    out.mkdir(parents=True, exist_ok=True)
    if summary.get("method") != "grpo":  # GRPO's trainer wrote its own plot and weights
        for name in RUN_FILES:
            (out / name).unlink(missing_ok=True)
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
