"""What one GRPO run depends on (`TrainConfig`) and the values each field allows, torch-free, so
that `python -m course.train` (`course.train`) answers a bad flag with a one-line usage error
before torch loads (`course.cli`); `course.loop.train.train` runs the loop.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from pathlib import Path

from course.cli import bounded_types, flag_type, out_of_range
from course.paths import CHECKPOINTS
from course.variants import (
    FRONTIER_PG_METHODS,
    GRPO_LOSS_FNS,
    IS_LEVELS,
    IS_MODES,
    KL_ESTIMATORS,
    LOSS_NORMALIZATIONS,
    MODEL_DTYPES,
    OVERLONG,
    RATIO_AGAINST,
    RUN_BASELINES,
    RUN_NORMALIZERS,
    RUN_PG_METHODS,
    TASKS,
)

WARM_START = CHECKPOINTS / "warm_start"
# What `--out DIR` receives, in the order it is written.
RUN_FILES = ("metrics.jsonl", "summary.json", "training_curves.png", "policy.pt")
CHOICES = {"pg_method": RUN_PG_METHODS, "normalization": LOSS_NORMALIZATIONS,
           "sampler_dtype": ("float32", "bfloat16"),
           "baseline": RUN_BASELINES, "advantage_normalizer": RUN_NORMALIZERS,
           "kl_estimator": KL_ESTIMATORS,
           "task": TASKS, "model_dtype": MODEL_DTYPES, "overlong": OVERLONG, "is_level": IS_LEVELS,
           "is_mode": IS_MODES, "ratio_against": RATIO_AGAINST}
# More torch threads than cores only wait on each other; far more crash torch's thread pool.
MAX_THREADS = os.cpu_count() or 1
MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit integer
# The lowest value of each numeric option, whether that value itself is allowed, and (where a value
# too high crashes rather than merely runs long) the highest.
BOUNDS = {
    "steps": (0, True),
    "prompts_per_step": (1, True),
    "group_size": (1, True),
    "lr": (0, False),
    "weight_decay": (0, True),
    "cliprange": (0, False),
    "clip_higher": (0, True),
    "normalization_constant": (0, True),
    "updates_per_rollout": (1, True),
    "gradient_accumulation_steps": (1, True),
    "max_grad_norm": (0, True),
    "max_new_tokens": (1, True),
    "temperature": (0, False),
    "tis_cap": (0, False),
    "kl_beta": (0, True),
    "eval_problems": (1, True),
    "eval_samples": (1, True),
    "eval_every": (0, True),
    "seed": (0, True, MAX_SEED),
    "threads": (0, True, MAX_THREADS),
    "lora_rank": (0, True),
    "logits_chunk_size": (0, True),
    "dynamic_sampling_tolerance": (0, True),
    "overlong_buffer": (1, True),
    "entropy_coef": (0, True),
    "dual_clip": (0, True),
    "sapo_tau_pos": (0, False),
    "sapo_tau_neg": (0, False),
    "trust_region": (0, False),
    "outlier_low": (0, True),
    "outlier_high": (0, True),
}
# the methods whose ratio r = π/π_b a trainer clips, gates or masks: --ratio-against and the outlier
# mask act on them
RATIO_PG_METHODS = ("grpo", "dapo", "cispo") + FRONTIER_PG_METHODS


@dataclass
class TrainConfig:
    """Everything one GRPO run depends on; `python -m course.train --help` lists it, one flag per
    field (`--kebab-case`). The fields are in sections by what they govern: what is trained,
    sampling, the advantages, the loss, optimization, evaluation and the machine; where the run
    writes is the command's own `--out`."""

    # --- What is trained: the policy and its task
    checkpoint: str = str(WARM_START)
    """Folder with the starting policy and tokenizer (`save_model_and_tokenizer` format)."""
    model: str = ""
    """A Hugging Face causal LM to train instead of --checkpoint: a local folder, or a hub id with
    --allow-download."""
    allow_download: bool = False
    """Let --model and --data name something on the Hugging Face hub, and download it."""
    model_dtype: str = "float32"
    """Weights of --model: float32, bfloat16 (log-probs are still float32) or float16."""
    task: str = "addition"
    """What to train on: addition (synthetic) or gsm8k (GSM8K-format problems from --data)."""
    data: str = ""
    """For --task gsm8k: a GSM8K-format JSONL file, or a hub dataset name with --allow-download."""

    # --- Sampling: the rollouts of each step
    steps: int = 500
    """Rollout batches (each followed by `updates_per_rollout` optimizer steps)."""
    prompts_per_step: int = 8
    """Problems per rollout batch, over all ranks; must divide evenly among them."""
    group_size: int = 8
    """G: responses sampled per problem; advantages compare a response with its group."""
    max_new_tokens: int = 16
    """Longest response; a complete answer takes 7 or 8 tokens."""
    temperature: float = 1.0
    """Sampling temperature τ of the rollouts; the sampler, π_old, π_θ and the reference are all
    scored as softmax(logits / τ), the distribution sampled from (held-out accuracy stays sampled at
    1)."""
    sampler_dtype: str = "float32"
    """Precision of the sampling copy of the policy: float32 (the policy itself) or bfloat16."""
    dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal (within --dynamic-sampling-tolerance) before the
    update (DAPO)."""
    dynamic_sampling_tolerance: float = 1e-6
    """A group is constant when max − min of its rewards is at most this."""
    overlong: str = "none"
    """Truncated responses: none, filter (no policy-gradient term) or soft (DAPO's length
    penalty)."""
    overlong_buffer: int = 4
    """L_c of the soft overlong penalty: it ramps from 0 to −1 over the last this many tokens."""

    # --- The advantages
    baseline: str = "mean"
    """Advantage baseline: mean (GRPO), none (rejection-sampling fine-tuning) or leave_one_out
    (RLOO: the mean of the G − 1 others; `course.advantages`)."""
    advantage_normalizer: str = "std"
    """Divide centered rewards by the group's std (GRPO), mean (MaxRL) or none (Dr. GRPO), or
    whiten them over the step's whole batch: batch (REINFORCE++; with baseline mean,
    REINFORCE++-baseline)."""

    # --- The loss: the policy gradient (stages 4 and 5), notebook 11's options, the
    # normalization, the penalties and the sampler correction
    pg_method: str = "grpo"
    """Policy-gradient loss: none (REINFORCE), noclip, grpo (PPO clip), gspo (stage 4's
    compute_policy_gradient_loss), dapo, cispo (stage 5's compute_grpo_loss, open-instruct's), or
    sapo (soft gate, arXiv 2511.20347), gmpo (clipped geometric mean, arXiv 2507.20673), dppo
    (probability trust region, arXiv 2602.04879; prime-rl's default), from course.frontier.loss."""
    cliprange: float = 0.2
    """ε of the clipped losses (grpo, gspo); ε_low of dapo, clipping the ratio below at 1 − ε;
    gmpo's bound in log space, log r ≥ −ε (the GMPO paper uses 0.4)."""
    clip_higher: float = 0.0
    """ε_high of dapo, cispo and gmpo: the ratio is clipped (cispo: capped; gmpo: in log space)
    above at 1 + ε_high; DAPO's clip-higher is 0.28 (Yu et al. 2025, arXiv 2503.14476). 0:
    --cliprange."""
    dual_clip: float = 0.0
    """c of dual-clip PPO for --pg-method grpo or dapo: a token with A < 0 costs at most c·|A| (Ye
    et al. 2020, arXiv 1912.09729; verl's clip_ratio_c, 3). 0: off; otherwise above 1."""
    cispo_floor: bool = False
    """--pg-method cispo: floor the weight at 1 − --cliprange too, as verl's cispo does (off: capped
    above only, as MiniMax-M1, arXiv 2506.13585, and open-instruct)."""
    sapo_tau_pos: float = 1.0
    """SAPO's gate temperature where A > 0 (--pg-method sapo; verl tau_pos, TRL
    sapo_temperature_pos)."""
    sapo_tau_neg: float = 1.05
    """SAPO's gate temperature where A ≤ 0 (verl tau_neg, TRL sapo_temperature_neg)."""
    trust_region: float = 0.2
    """δ of --pg-method dppo: a token whose probability moved more than δ from π_b's in the
    direction its advantage pushes is dropped (prime-rl's dppo_mask_low and dppo_mask_high)."""
    ratio_against: str = "old"
    """What the ratio r = π/π_b of grpo, dapo, cispo, sapo, gmpo and dppo is taken against: old
    (π_old) or sampler (the rollout's own log-probs, as prime-rl, and SkyRL's cispo_anchor=rollout;
    the truncated importance weights are then left out, r holds that correction)."""
    outlier_low: float = 0.0
    """Drop tokens whose ratio r is below this (TRL's token_mask,
    vllm_importance_sampling_clip_min); 0: off."""
    outlier_high: float = 0.0
    """Drop tokens whose ratio r is above this (TRL's token_mask,
    vllm_importance_sampling_clip_max); 0: off."""
    normalization: str = "sequence"
    """Loss normalization: sequence (GRPO), token (DAPO), constant (Dr. GRPO)."""
    normalization_constant: float = 0.0
    """C for constant normalization; 0 means rollouts per step × max_new_tokens."""
    kl_beta: float = 0.0
    """β of the KL penalty β·KL(π ‖ π_ref) to the starting policy, added to every token's loss (0:
    none)."""
    kl_estimator: str = "k3"
    """Estimator of the KL penalty: k1 (δ), k2 (δ²/2), k3 (exp(−δ) − 1 + δ), ratio_k1 (ratio·δ)."""
    tis_cap: float = 2.0
    """Cap of the truncated importance weights min(π_old/π_sampler, cap) that correct the loss for a
    bf16 sampler (truncated importance sampling, applied only when sampler_dtype is bfloat16)."""
    is_level: str = "token"
    """Importance ratio of the sampler correction: token, sequence (product) or geometric (mean)."""
    is_mode: str = "truncate"
    """Above --tis-cap: truncate (min(ρ, cap)) or mask (weight 0)."""
    entropy_coef: float = 0.0
    """c of the entropy bonus −c · H added to the loss, normalized as the loss is
    (course.loop.entropy_bonus; 0: none)."""

    # --- Optimization: the update
    lr: float = 1e-4
    """AdamW learning rate, constant; ten times below the warm start's 1e-3. At 2e-4 (8 x 8 rollouts
    per step) greedy accuracy fell from 0.93 to 0.69: the policy collapsed onto wrong answers."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    updates_per_rollout: int = 1
    """Optimizer steps per rollout batch; above 1 the policy moves off the sampler and clipping
    acts."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step on each rank; the update does not depend on it."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this (0 disables clipping)."""

    # --- Evaluation: the held-out accuracy
    eval_problems: int = 500
    """Held-out problems for the accuracy reports (at least 200 for the course's bar)."""
    eval_samples: int = 4
    """Samples per held-out problem for the sampled (temperature 1) accuracy."""
    eval_every: int = 100
    """Evaluate every this many steps (0: only before and after training)."""

    # --- The machine: where and how the run computes (its output is --out, a flag of the command)
    seed: int = 0
    """Seeds the problem order, the rollout sampling and torch."""
    device: str = "cpu"
    """Where the policy, the reference and the sampler live: cpu, cuda, cuda:N or auto (cuda where
    torch sees one)."""
    threads: int = 1
    """torch CPU threads per process (0: torch's default). A 1M-parameter model runs fastest on one:
    its matrices are too small to split, and on a busy machine extra threads wait on each other."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (less memory, about a third more compute)."""
    lora_rank: int = 0
    """Train LoRA adapters of this rank instead of every weight (0: full fine-tuning; needs
    .[lora])."""
    logits_chunk_size: int = 0
    """Positions per output-head tile when scoring (course.chunked_head; 0: the plain head; not
    under DDP)."""


class ConfigError(ValueError):
    """A bad value of one TrainConfig field; `field` names it (the command line names its flag)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field} {message}")
        self.field, self.message = field, message


def _cuda_available() -> bool:
    import torch  # only for a CUDA device: a CPU run's flags are checked without torch

    return torch.cuda.is_available()


def device_problem(device: str) -> str | None:
    """Why `device` cannot hold the run (None when it can)."""
    if device == "auto":  # resolved when the run starts (course.loop.train.resolve_device)
        return None
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        return f"must be cpu, cuda or cuda:N, got {device!r}"
    if kind == "cuda" and not _cuda_available():
        return f"{device!r}: torch sees no CUDA device (torch.cuda.is_available() is False)"
    return None


def checkpoint_problem(folder: str) -> str | None:
    """Why `folder` is not a saved policy (None when it is one)."""
    if not Path(folder).is_dir():
        return f"{folder!r} is not a folder"
    if not (Path(folder) / "config.json").is_file():
        return f"{folder!r} holds no saved model (no config.json; see save_model_and_tokenizer)"
    return None


def model_source_problem(source: str, allow_download: bool) -> str | None:
    """Why `source` cannot be loaded (None when it can): a folder needs a config.json; anything
    else is a hub id, loaded only with `allow_download`."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            return f"{source!r} holds no saved model (no config.json)"
        return None
    if allow_download:
        return None
    return (f"{source!r} is not a local folder; to download it from the Hugging Face hub, "
            "pass --allow-download (nothing downloads without it)")


def data_problem(config: TrainConfig) -> str | None:
    """Why --data cannot feed --task (None when it can)."""
    if config.task == "addition":
        return "is only read by --task gsm8k" if config.data else None
    if not config.data:
        return "is needed by --task gsm8k: a GSM8K-format JSONL file"
    if not Path(config.data).is_file() and not config.allow_download:
        return (f"{config.data!r} is not a file; to download a hub dataset, pass --allow-download "
                "(nothing downloads without it)")
    return None


def validate(config: TrainConfig, world_size: int) -> None:
    """Raise ConfigError naming the first field whose value cannot run."""
    for name, allowed in CHOICES.items():
        if getattr(config, name) not in allowed:
            raise ConfigError(name, f"must be one of {allowed}, got {getattr(config, name)!r}")
    for name in BOUNDS:
        if problem := out_of_range(getattr(config, name), *BOUNDS[name]):
            raise ConfigError(name, problem)
    model_problem = model_source_problem(config.model,
                                         config.allow_download) if config.model else None
    for name, problem in (("device", device_problem(config.device)),
                          ("checkpoint", checkpoint_problem(config.checkpoint)),
                          ("model", model_problem), ("data", data_problem(config))):
        if problem:
            raise ConfigError(name, problem)
    if config.prompts_per_step % world_size:
        raise ConfigError("prompts_per_step", f"({config.prompts_per_step}) must divide among "
                                              f"{world_size} ranks")
    rows = config.prompts_per_step // world_size * config.group_size
    if config.gradient_accumulation_steps > rows:
        raise ConfigError("gradient_accumulation_steps", f"({config.gradient_accumulation_steps}) "
                                                         "must be at most "
                          f"the {rows} rollouts each rank trains on per step")
    if config.logits_chunk_size and (world_size > 1 or config.lora_rank):
        raise ConfigError("logits_chunk_size", "must be 0 under data parallelism or with LoRA (the "
                                               "chunked "
                          "head bypasses the forward that DDP and peft wrap)")
    if config.entropy_coef and world_size > 1:
        raise ConfigError("entropy_coef", "must be 0 under data parallelism (the bonus's backward "
                                          "runs "
                          "outside the train step's DDP synchronization)")
    if config.overlong == "soft" and config.overlong_buffer > config.max_new_tokens:
        raise ConfigError("overlong_buffer", f"({config.overlong_buffer}) must be at most "
                                             "max_new_tokens "
                          f"({config.max_new_tokens})")
    if config.clip_higher and config.pg_method not in GRPO_LOSS_FNS + ("gmpo",):
        raise ConfigError("clip_higher", f"applies to --pg-method {', '.join(GRPO_LOSS_FNS)} or "
                                         "gmpo only, "
                          f"got --pg-method {config.pg_method}")
    frontier_problems(config)
    if config.group_size < 2 and config.advantage_normalizer == "std":
        raise ConfigError("group_size", "must be at least 2 for advantage_normalizer std (the std "
                                        "of one reward)")
    if config.group_size < 2 and config.baseline == "leave_one_out":
        raise ConfigError("group_size", "must be at least 2 for baseline leave_one_out (one "
                                        "reward has no others)")
    if config.advantage_normalizer == "batch" and config.prompts_per_step * config.group_size < 2:
        raise ConfigError("advantage_normalizer", "batch needs at least 2 rollouts per step "
                          "(prompts_per_step × group_size): the std of one reward is undefined")


def frontier_problems(config: TrainConfig) -> None:
    """Raise ConfigError naming the first option of course.frontier.loss that cannot run with the
    rest."""
    method = config.pg_method
    if config.dual_clip and not config.dual_clip > 1:
        raise ConfigError("dual_clip", f"must be 0 (off) or above 1, got {config.dual_clip}")
    if config.dual_clip and method not in ("grpo", "dapo"):
        raise ConfigError("dual_clip", "applies to --pg-method grpo or dapo only, got --pg-method "
                                       f"{method}")
    if config.cispo_floor and method != "cispo":
        raise ConfigError("cispo_floor", "applies to --pg-method cispo only, got --pg-method "
                                         f"{method}")
    for name in ("ratio_against", "outlier_low", "outlier_high"):
        if getattr(config, name) not in ("old", 0.0) and method not in RATIO_PG_METHODS:
            raise ConfigError(name, f"applies to --pg-method {', '.join(RATIO_PG_METHODS)} only, "
                              f"got --pg-method {method}")
    if config.outlier_high and config.outlier_low > config.outlier_high:
        raise ConfigError("outlier_low", f"({config.outlier_low}) must be at most outlier_high "
                          f"({config.outlier_high})")
    if config.ratio_against == "sampler" and (config.is_level, config.is_mode) != ("token",
                                                                                   "truncate"):
        raise ConfigError("ratio_against", "sampler takes the rollout's own log-probs, which "
                                           "--is-level "
                          "and --is-mode other than token and truncate replace by their weights")
    if config.ratio_against == "sampler" and config.overlong == "filter":
        raise ConfigError("ratio_against", "sampler takes the rollout's own log-probs, which "
                                           "--overlong "
                          "filter replaces by its weights")
    if config.advantage_normalizer == "mean" and config.overlong == "soft":
        raise ConfigError("advantage_normalizer", "mean (MaxRL) needs rewards >= 0, and --overlong "
                                                  "soft "
                          "penalizes below 0 (course.frontier.maxrl)")


def frontier_field(config: TrainConfig) -> str | None:
    """The first field of `config` that trains with course.frontier.loss's FrontierLoss (None: none
    does)."""
    if config.pg_method in FRONTIER_PG_METHODS:
        return "pg_method"
    for name, off in (("dual_clip", 0.0), ("cispo_floor", False), ("ratio_against", "old"),
                      ("outlier_low", 0.0), ("outlier_high", 0.0)):
        if getattr(config, name) != off:
            return name
    return None


def frontier_loss_problem(train_step, config: TrainConfig) -> str | None:
    """Why `train_step` cannot train with the FrontierLoss that `config` asks for (None when it can,
    or when none is asked for): its grpo_loss must take a `PerTokenLoss` (`course.train_step`),
    whose `per_token_loss` the reference's helper `grpo_loss_per_token` calls."""
    field = frontier_field(config)
    if field is None:
        return None
    helper = getattr(train_step, "__globals__", {}).get("grpo_loss_per_token")
    if _accepts(train_step, "grpo_loss") and "per_token_loss" in getattr(getattr(helper, "__code__",
                                                                                 None),
                                                                          "co_names", ()):
        return None
    value = getattr(config, field)
    return (f"{value} trains with course.frontier.loss's FrontierLoss, which needs a "
            "grpo_train_step whose "
            "grpo_loss may be a PerTokenLoss; the grpo_train_step of your notebooks takes "
            "stage 5's GRPOLossConfig only (see 07_train_step)")


def _accepts(train_step, name: str) -> bool:
    parameters = inspect.signature(train_step).parameters
    return name in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def temperature_problem(train_step) -> str | None:
    """Why `train_step` cannot train on rollouts sampled at a temperature (None when it can)."""
    if _accepts(train_step, "temperature"):
        return None
    return ("needs a grpo_train_step(..., temperature=1.0) that scores π_θ at the sampling "
            "temperature; the grpo_train_step of your notebooks takes no temperature (see "
            "07_train_step)")


def grpo_loss_problem(train_step, pg_method: str) -> str | None:
    """Why `train_step` cannot train with `pg_method` (None when it can): dapo and cispo run
    stage 5's loss, which the train step receives as `grpo_loss`."""
    if pg_method not in GRPO_LOSS_FNS or _accepts(train_step, "grpo_loss"):
        return None
    return (f"{pg_method} needs a grpo_train_step(..., grpo_loss=None) that computes stage 5's "
            "compute_grpo_loss; the grpo_train_step of your notebooks takes no grpo_loss (see "
            "07_train_step)")


def flag_types(config_class=TrainConfig) -> dict:
    """argparse `type=` functions that check each TrainConfig field's flag as it is parsed."""
    return {**bounded_types(config_class, BOUNDS), "device": flag_type(str, device_problem),
            "checkpoint": flag_type(str, checkpoint_problem)}

