"""End-to-end GRPO: the course's stages, assembled into a loop that learns on a laptop CPU.

    python -m course.train --out runs/grpo                      # one process
    torchrun --nproc_per_node 2 -m course.train --out runs/dp   # data parallel (gloo on CPU)

Each step: draw `prompts_per_step` training problems, sample `group_size` responses to each with
the current policy (`course.rollout`), score old / reference log-probs, and take
`updates_per_rollout` optimizer steps with `course.grpo_train_step` (rewards → group advantages →
per-token loss → normalization → backward → clip → step). GRPO is Shao et al. 2024 (arXiv
2402.03300); the loss variants and normalizations are those of `course.losses` and
`course.aggregation`. The policy starts from the shipped supervised warm start
(`course/checkpoints/warm_start`, made by `python -m course.warm_start`), because RL sharpens what
a policy can already sometimes do.

Under `torchrun`, every rank draws the same problems and keeps whole groups of its own; sampling is
seeded per row (`rollout.row_seed`), so the rollouts, and therefore the updates, are those of the
single-process run. `--out DIR` writes `metrics.jsonl` (one record per step), `summary.json`,
`training_curves.png` and the final weights `policy.pt`. `--notebooks DIR` trains with the
learner's own stages, read from their notebooks (`course.implementations`): their train step on
their tokenizer, scorer, advantages, losses and aggregation, each falling back to the reference
where it is not written yet. In a student edition that has not revealed every stage, the
default is the edition's own `notebooks/`.

Measured with the defaults on a 2-core CPU (seeds 0, 1, 2; `benchmarks/README.md`): held-out
answer accuracy on 500 problems, sampled at temperature 1, rose from 23% to a median of 73% (greedy:
46% to 92%); a run takes about 250 s of CPU on one thread, about 4 minutes on an idle machine.
`python -m course.compare` runs the loss variants side by side.
"""

from __future__ import annotations

import argparse
import ast
import copy
import inspect
import json
import math
import os
import platform
import random
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from course.advantages import BASELINES, NORMALIZERS
from course.aggregation import LOSS_NORMALIZATIONS
from course.distributed import rank_and_world_size
from course.implementations import (
    Implementations,
    StageNotWritten,
    load_implementations,
    missing_references,
    stand_in_for_stubs,
)
from course.losses import KL_ESTIMATORS, PG_METHODS, estimate_kl, truncated_importance_weights
from course.metrics import compare_logprobs
from course.models import load_model_and_tokenizer
from course.plotting import plot_training_curves
from course.registry import STAGE_NAMED, STAGE_OF
from course.rollout import RolloutBatch, evaluate, sample_groups, score_tokens, tokenize_rollouts
from course.tasks import make_problems, r1_zero_reward_fn
from course.train_step import grpo_train_step

WARM_START = Path(__file__).parent / "checkpoints" / "warm_start"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # a student edition's folder holds edition.json
LOSSES = PG_METHODS
NORMALIZATIONS = LOSS_NORMALIZATIONS
CHOICES = {"loss": LOSSES, "normalization": NORMALIZATIONS, "sampler_dtype": ("float32", "bfloat16"),
           "baseline": BASELINES, "advantage_normalizer": NORMALIZERS, "kl_estimator": KL_ESTIMATORS}
# The lowest value of each numeric option, and whether that value itself is allowed.
LOWER_BOUNDS = {
    "steps": (0, True), "prompts_per_step": (1, True), "group_size": (1, True), "lr": (0, False),
    "weight_decay": (0, True), "cliprange": (0, False), "normalization_constant": (0, True),
    "updates_per_rollout": (1, True), "gradient_accumulation_steps": (1, True), "max_grad_norm": (0, True),
    "max_new_tokens": (1, True), "temperature": (0, False), "tis_cap": (0, False), "kl_beta": (0, True),
    "eval_problems": (1, True), "eval_samples": (1, True), "eval_every": (0, True), "seed": (0, True),
    "threads": (0, True),
}
# The held-out problems and their sampling noise are fixed, so every run is measured on the same test.
EVAL_SEED = 1
REWARD_KEYS = ("reward_mean", "format_reward_mean", "answer_reward_mean")


@dataclass
class TrainConfig:
    """Everything one GRPO run depends on; `python -m course.train --help` lists it."""

    checkpoint: str = str(WARM_START)
    """Folder with the starting policy and tokenizer (`save_model_and_tokenizer` format)."""
    steps: int = 500
    """Rollout batches (each followed by `updates_per_rollout` optimizer steps)."""
    prompts_per_step: int = 8
    """Problems per rollout batch, over all ranks; must divide evenly among them."""
    group_size: int = 8
    """G: responses sampled per problem; advantages compare a response with its group."""
    lr: float = 1e-4
    """AdamW learning rate, constant; ten times below the warm start's 1e-3. At 2e-4 (8 x 8 rollouts
    per step) greedy accuracy fell from 0.93 to 0.69: the policy collapsed onto wrong answers."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    loss: str = "grpo"
    """Policy-gradient loss: none (REINFORCE), noclip, grpo (PPO clip), gspo, cispo."""
    cliprange: float = 0.2
    """ε of the clipped losses (grpo, gspo, cispo)."""
    normalization: str = "sequence"
    """Loss normalization: sequence (GRPO), token (DAPO), constant (Dr. GRPO)."""
    normalization_constant: float = 0.0
    """C for constant normalization; 0 means rollouts per step × max_new_tokens."""
    baseline: str = "mean"
    """Advantage baseline: mean (GRPO) or none (rejection-sampling fine-tuning)."""
    advantage_normalizer: str = "std"
    """Divide centered rewards by the group's std (GRPO), mean (MaxRL) or none (Dr. GRPO)."""
    updates_per_rollout: int = 1
    """Optimizer steps per rollout batch; above 1 the policy moves off the sampler and clipping acts."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step on each rank; the update does not depend on it."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this (0 disables clipping)."""
    max_new_tokens: int = 16
    """Longest response; a complete answer takes 7 or 8 tokens."""
    temperature: float = 1.0
    """Sampling temperature τ of the rollouts; the sampler, π_old, π_θ and the reference are all scored as
    softmax(logits / τ), the distribution sampled from (held-out accuracy stays sampled at 1)."""
    sampler_dtype: str = "float32"
    """Precision of the sampling copy of the policy: float32 (the policy itself) or bfloat16."""
    tis_cap: float = 2.0
    """Cap of the truncated importance weights min(π_old/π_sampler, cap) that correct the loss for a
    bf16 sampler (truncated importance sampling, applied only when sampler_dtype is bfloat16)."""
    kl_beta: float = 0.0
    """β of the KL penalty β·KL(π ‖ π_ref) to the starting policy, added to every token's loss (0: none)."""
    kl_estimator: int = 2
    """Estimator of the KL penalty: 0 (k1 = δ), 1 (k2 = δ²/2), 2 (k3 = exp(−δ) − 1 + δ), 3 (ratio·δ)."""
    eval_problems: int = 500
    """Held-out problems for the accuracy reports (at least 200 for the course's bar)."""
    eval_samples: int = 4
    """Samples per held-out problem for the sampled (temperature 1) accuracy."""
    eval_every: int = 100
    """Evaluate every this many steps (0: only before and after training)."""
    seed: int = 0
    """Seeds the problem order, the rollout sampling and torch."""
    device: str = "cpu"
    """Where the policy, the reference and the sampler live: cpu, cuda or cuda:N."""
    threads: int = 1
    """torch CPU threads per process (0: torch's default). A 1M-parameter model runs fastest on one:
    its matrices are too small to split, and on a busy machine extra threads wait on each other."""


def field_help(config_class) -> dict[str, str]:
    """The docstring written under each dataclass field, by field name."""
    tree = ast.parse(inspect.getsource(config_class))
    body = tree.body[0].body
    docs = {}
    for node, following in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)):
            docs[node.target.id] = following.value.value
    return docs


def add_config_arguments(parser: argparse.ArgumentParser, config_class, choices=None, exclude=(),
                         types=None) -> None:
    """One `--kebab-case` option per field (but `exclude`), typed by `types` or its default, helped by its docstring."""
    docs, choices, types = field_help(config_class), choices or {}, types or {}
    for field in (f for f in fields(config_class) if f.name not in exclude):
        default = field.default
        parser.add_argument("--" + field.name.replace("_", "-"), dest=field.name,
                            type=types.get(field.name, type(default)),
                            default=default, choices=choices.get(field.name),
                            help=f"{docs.get(field.name, '').replace('%', '%%')} (default: {default})")


class ConfigError(ValueError):
    """A bad value of one TrainConfig field; `field` names it (the command line names its flag)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field} {message}")
        self.field, self.message = field, message


def out_of_range(name: str, value) -> str | None:
    """Why `value` is not allowed for the numeric field `name` (None when it is)."""
    low, inclusive = LOWER_BOUNDS[name]
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if value < low or (value == low and not inclusive):
        return f"must be {'>=' if inclusive else '>'} {low}, got {value}"
    return None


def device_problem(device: str) -> str | None:
    """Why `device` cannot hold the run (None when it can)."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        return f"must be cpu, cuda or cuda:N, got {device!r}"
    if kind == "cuda" and not torch.cuda.is_available():
        return f"{device!r}: torch sees no CUDA device (torch.cuda.is_available() is False)"
    return None


def checkpoint_problem(folder: str) -> str | None:
    """Why `folder` is not a saved policy (None when it is one)."""
    if not Path(folder).is_dir():
        return f"{folder!r} is not a folder"
    if not (Path(folder) / "config.json").is_file():
        return f"{folder!r} holds no saved model (no config.json; see save_model_and_tokenizer)"
    return None


def validate(config: TrainConfig, world_size: int) -> None:
    """Raise ConfigError naming the first field whose value cannot run."""
    for name, allowed in CHOICES.items():
        if getattr(config, name) not in allowed:
            raise ConfigError(name, f"must be one of {allowed}, got {getattr(config, name)!r}")
    for name in LOWER_BOUNDS:
        if problem := out_of_range(name, getattr(config, name)):
            raise ConfigError(name, problem)
    for name, problem in (("device", device_problem(config.device)),
                          ("checkpoint", checkpoint_problem(config.checkpoint))):
        if problem:
            raise ConfigError(name, problem)
    if config.prompts_per_step % world_size:
        raise ConfigError("prompts_per_step", f"({config.prompts_per_step}) must divide among {world_size} ranks")
    rows = config.prompts_per_step // world_size * config.group_size
    if config.gradient_accumulation_steps > rows:
        raise ConfigError("gradient_accumulation_steps", f"({config.gradient_accumulation_steps}) must be at most "
                          f"the {rows} rollouts each rank trains on per step")
    if config.group_size < 2 and config.advantage_normalizer == "std":
        raise ConfigError("group_size", "must be at least 2 for advantage_normalizer std (the std of one reward)")


def temperature_problem(train_step) -> str | None:
    """Why `train_step` cannot train on rollouts sampled at a temperature (None when it can)."""
    parameters = inspect.signature(train_step).parameters.values()
    if any(p.name == "temperature" or p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return ("needs a grpo_train_step(..., temperature=1.0) that scores π_θ at the sampling "
            "temperature; the grpo_train_step of your notebooks takes no temperature (see 06_train_step)")


def _reduce_over_ranks(sums: dict[str, float], maxima: dict[str, float]) -> dict[str, float]:
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


def held_out_accuracy(model, tokenizer, config: TrainConfig) -> dict[str, float]:
    """Answer accuracy on the held-out problems: sampled at temperature 1, and greedy."""
    problems = make_problems(config.eval_problems, seed=EVAL_SEED, split="test")
    sampled = evaluate(model, tokenizer, problems, seed=EVAL_SEED, samples_per_problem=config.eval_samples,
                       max_new_tokens=config.max_new_tokens)
    greedy = evaluate(model, tokenizer, problems, seed=None, max_new_tokens=config.max_new_tokens)
    return {"heldout_accuracy_sampled": sampled["answer_reward"],
            "heldout_format_sampled": sampled["format_reward"],
            "heldout_accuracy_greedy": greedy["answer_reward"]}


def rollout_log_probs(policy, reference, tokenizer, rollouts: RolloutBatch, config: TrainConfig,
                      separate_sampler: bool) -> tuple[dict[str, torch.Tensor | None], dict[str, float]]:
    """Old, reference and (for a bf16 sampler) sampler log-probs (B, T), and rollout statistics over ranks.

    A float32 sampler is the policy itself, so its log-probs are the old ones (no extra forward);
    a bf16 sampler's are not, so the policy re-scores the batch and the two are compared. Token
    means (KL to the reference, the mismatch) are global: per-rank sums over per-rank counts.
    """
    tokens = tokenize_rollouts(tokenizer, rollouts)
    mask, sampler_log_probs = tokens["response_mask"], tokens["sampler_log_probs"]   # (B, T)
    # every log-prob is of softmax(z/τ), the distribution sampled at τ = config.temperature
    old_log_probs = score_tokens(policy, tokens, config.temperature) if separate_sampler else sampler_log_probs
    ref_log_probs = score_tokens(reference, tokens, config.temperature)
    kl = estimate_kl(old_log_probs, ref_log_probs, estimator=2)                      # k3, (B, T)
    count = float(mask.sum())
    token_means = {"kl_to_reference": float((kl * mask).sum()) / max(count, 1)}
    maxima = {}
    if separate_sampler:
        mismatch = compare_logprobs(sampler_log_probs, old_log_probs, mask)
        maxima["logprob_diff_max"] = mismatch.pop("logprob_diff_max")
        token_means.update(mismatch)
        weights = truncated_importance_weights(old_log_probs, sampler_log_probs, config.tis_cap, mask)
        token_means["tis_weight_mean"] = float(weights.sum()) / max(count, 1)
        token_means["tis_capped_fraction"] = float(((weights >= config.tis_cap) & mask.bool()).sum()) / max(count, 1)
    sums = {key: value * count for key, value in token_means.items()}
    reduced = _reduce_over_ranks({**sums, "tokens": count, "rows": float(len(rollouts))}, maxima)
    tokens_total = max(reduced.pop("tokens"), 1.0)
    stats = {key: reduced[key] / tokens_total for key in token_means}
    stats.update({key: reduced[key] for key in maxima})
    stats["response_length"] = tokens_total / reduced["rows"]
    stats["generated_tokens"] = tokens_total
    log_probs = {"old_log_probs": old_log_probs, "ref_log_probs": ref_log_probs,
                 "sampler_log_probs": sampler_log_probs if separate_sampler else None}
    return log_probs, stats


def train(config: TrainConfig, out: Path | None = None, progress: bool = True,
          implementations: Implementations | None = None) -> dict:
    """Run GRPO with `config`; write metrics, summary and plots to `out`. Returns the summary.
    `implementations`: whose graded functions take the optimizer step (default: the reference's)."""
    train_step = implementations["grpo_train_step"] if implementations else grpo_train_step
    rank, world_size = rank_and_world_size()
    validate(config, world_size)
    if problem := temperature_problem(train_step):
        raise ConfigError("temperature", problem)
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    start = time.time()
    policy, tokenizer = load_model_and_tokenizer(config.checkpoint)
    policy.to(config.device)
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    separate_sampler = config.sampler_dtype != "float32"
    sampler = copy.deepcopy(policy).to(torch.bfloat16).eval() if separate_sampler else policy
    model = torch.nn.parallel.DistributedDataParallel(policy) if world_size > 1 else policy
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)

    pool = make_problems(None, seed=config.seed, split="train")
    problem_rng = random.Random(config.seed)
    per_rank = config.prompts_per_step // world_size
    constant = (config.normalization_constant or config.prompts_per_step * config.group_size
                * config.max_new_tokens) if config.normalization == "constant" else None
    needs_old = config.loss != "none"

    records: list[dict] = []
    before = held_out_accuracy(policy, tokenizer, config) if rank == 0 else {}
    metrics_file = None
    if out is not None and rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        metrics_file = open(out / "metrics.jsonl", "w")
    bar = tqdm(range(1, config.steps + 1), disable=not progress or rank != 0,
               desc="GRPO", unit="step")
    for step in bar:
        step_start = time.time()
        problems = problem_rng.sample(pool, config.prompts_per_step)[rank * per_rank:(rank + 1) * per_rank]
        if separate_sampler:
            sampler.load_state_dict(policy.state_dict())
        policy.eval()
        rollouts = sample_groups(sampler, tokenizer, problems, config.group_size, config.seed, step,
                                 first_index=rank * per_rank, max_new_tokens=config.max_new_tokens,
                                 temperature=config.temperature)
        log_probs, stats = rollout_log_probs(policy, reference, tokenizer, rollouts, config,
                                                 separate_sampler)
        policy.train()
        for _ in range(config.updates_per_rollout):
            _, metadata = train_step(
                model, tokenizer, optimizer, config.gradient_accumulation_steps,
                config.max_grad_norm or None, r1_zero_reward_fn, rollouts.repeated_prompts,
                rollouts.responses, rollouts.repeated_ground_truths, config.group_size,
                baseline=config.baseline, advantage_normalizer=config.advantage_normalizer,
                importance_reweighting_method=config.loss,
                old_log_probs=log_probs["old_log_probs"] if needs_old else None,
                cliprange=config.cliprange if config.loss in ("grpo", "gspo", "cispo") else None,
                loss_normalization=config.normalization, normalization_constant=constant,
                kl_beta=config.kl_beta, kl_estimator=config.kl_estimator,
                ref_log_probs=log_probs["ref_log_probs"] if config.kl_beta > 0 else None,
                sampler_log_probs=log_probs["sampler_log_probs"], tis_cap=config.tis_cap,
                temperature=config.temperature,
            )
        # The train step's statistics are per rank for rewards (equal row counts: mean of means).
        rewards = _reduce_over_ranks({k: metadata[k] / world_size for k in REWARD_KEYS}, {})
        seconds = time.time() - step_start
        generated_tokens = stats.pop("generated_tokens")
        record = {"step": step, **stats, **rewards,
                  "token_entropy": float(metadata["token_entropy"]),
                  "clip_fraction": float(metadata.get("clip_fraction", 0.0)),
                  "gradient_norm": float(metadata["gradient_norm"]),
                  "loss": float(metadata["loss"]),
                  "tokens_per_second": generated_tokens / seconds,
                  "step_seconds": seconds}
        if rank == 0 and config.eval_every and step % config.eval_every == 0 and step < config.steps:
            record.update(held_out_accuracy(policy, tokenizer, config))
        if rank == 0:
            records.append(record)
            if metrics_file:
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
            bar.set_postfix(reward=f"{record['reward_mean']:.2f}", entropy=f"{record['token_entropy']:.2f}")

    summary = {}
    if rank == 0:
        after = held_out_accuracy(policy, tokenizer, config)
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
            "world_size": world_size,
            "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, "
                       f"torch {torch.__version__}, {torch.get_num_threads()} threads/process",
            "config": asdict(config),
            "implementations": implementations.origins if implementations else "reference",
        }
        if out is not None:
            metrics_file.close()
            if records:
                # rewrite so that the last record carries the final evaluation too
                (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            plot_training_curves(records, before, out / "training_curves.png")
            torch.save({k: v.cpu() for k, v in policy.state_dict().items()}, out / "policy.pt")
    return summary


def _flag_type(kind, problem):
    """An argparse `type=`: convert with `kind`, then refuse what `problem` objects to."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if message := problem(value):
            raise argparse.ArgumentTypeError(message)
        return value
    return parse


def flag_types(config_class=TrainConfig) -> dict:
    """argparse `type=` functions that check each TrainConfig field's flag as it is parsed."""
    types = {name: _flag_type(type(getattr(config_class, name)), lambda value, name=name: out_of_range(name, value))
             for name in LOWER_BOUNDS}
    types["device"] = _flag_type(str, device_problem)
    types["checkpoint"] = _flag_type(str, checkpoint_problem)
    return types


def stages_of(names: tuple[str, ...]) -> str:
    """"3_advantages, 4_losses": the stages of the graded functions `names`, in course order."""
    return ", ".join(key for key in STAGE_NAMED if key in {STAGE_OF[name] for name in names})


def edition_notebooks(missing: tuple[str, ...], root: Path = PACKAGE_ROOT) -> Path:
    """The notebooks to train with when the reference of the graded functions `missing` is not
    here and no --notebooks was given: a student edition's own `notebooks/`. Raises ValueError
    naming --notebooks where `root` is no edition or holds no notebooks."""
    folder = root / "notebooks"
    if not (root / "edition.json").is_file() or not any(folder.glob("*.ipynb")):
        raise ValueError(f"the reference of stage {stages_of(missing)} is not here, and {folder} "
                         "holds no notebooks: give --notebooks DIR, the folder of your notebooks")
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m course.train", description=__doc__.split("\n\n")[0],
        epilog="Data parallel: torchrun --nproc_per_node N -m course.train [options] (gloo on CPU).")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for metrics.jsonl, summary.json, training_curves.png and policy.pt "
                             "(default: write nothing, print the summary)")
    parser.add_argument("--notebooks", type=Path, default=None, metavar="DIR",
                        help="train with your own stages, read from the notebooks in DIR (stages "
                             "not written yet use the reference where it is available)")
    add_config_arguments(parser, TrainConfig, choices=CHOICES, types=flag_types())
    args = vars(parser.parse_args(argv))
    out, notebooks = args.pop("out"), args.pop("notebooks")
    implementations = None
    missing = missing_references()
    if notebooks is None and missing:  # a student edition: train with the learner's stages
        try:
            notebooks = edition_notebooks(missing)
        except ValueError as error:
            parser.error(f"argument --notebooks: {error}")
        print(f"this student edition has not revealed stage {stages_of(missing)}: training "
              f"with your notebooks in {notebooks} (--notebooks DIR for another folder)")
    if notebooks is not None:
        try:
            implementations = load_implementations(notebooks)
        except (FileNotFoundError, StageNotWritten) as error:
            parser.error(f"argument --notebooks: {error}")
        # this module runs as __main__ under `python -m`: its own names of stubs too
        stand_in_for_stubs(implementations.functions, [globals()])
        print(implementations.table())
        if problem := temperature_problem(implementations["grpo_train_step"]):
            parser.error(f"argument --temperature: {problem}")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    try:  # what no single flag decides: values that must fit together, and the world size
        validate(TrainConfig(**args), world_size)
    except ConfigError as error:
        parser.error(f"argument --{error.field.replace('_', '-')}: {error.message}")
    distributed = world_size > 1
    if distributed:
        dist.init_process_group("gloo")
    try:
        summary = train(TrainConfig(**args), out, implementations=implementations)
        if distributed:
            dist.barrier()  # no rank tears gloo down while another is still communicating
    finally:
        if distributed:
            dist.destroy_process_group()
    if summary:
        print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=2))


if __name__ == "__main__":
    main()
