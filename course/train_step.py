"""Stage 7 — one GRPO optimizer step over one rollout batch.

rewards → group advantages → tokenize → K micro-batches → per-token loss → normalized
backward → clip → step. The per-token loss is the policy-gradient loss of `losses` (times
truncated importance weights when the sampler's log-probs are given) plus β·KL(π ‖ π_ref) when
`kl_beta` > 0:
  ℓ_t = w_t · pg_t + β · kl_t,   w_t = min(π_old/π_sampler, cap),
  kl_t = `estimate_kl` of log π − log π_ref,
as open-instruct's GRPO loss does (open_instruct/grpo_utils.py; TIS: Yao et al. 2025). Given a
`grpo_loss` config, stage 5's `compute_grpo_loss` computes the same ℓ instead (its pg_loss_max
and its β): DAPO's decoupled clip bounds or CISPO, as open-instruct configures them. An ungraded
loss of notebook 11 (`course.frontier.loss.FrontierLoss`) enters at one place: a `grpo_loss`
that is a `PerTokenLoss` computes the whole ℓ itself (`grpo_loss_per_token`).

The update is a function of the batch alone: not of `gradient_accumulation_steps`, not of which
rows share a micro-batch, not of how whole groups are split over data-parallel ranks. That holds
because every term is per token and every micro-batch is normalized by counts of the WHOLE step
(B sequences, N response tokens, summed over ranks) and scaled by the world size (DDP averages
gradients); see `aggregation`. Every row is scored, also those whose advantage is 0: their
policy-gradient term has no gradient, but their KL term does, and every rank makes exactly K
passes, as DDP requires.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
import torch.distributed as dist

from course.advantages import compute_group_normalized_rewards, compute_rollout_rewards
from course.aggregation import LOSS_NORMALIZATIONS, calculate_loss_and_backward
from course.distributed import is_distributed, rank_and_world_size
from course.losses import PG_COUNT_KEYS, compute_policy_gradient_loss
from course.metrics import LossStatistics
from course.off_policy import (
    GRPOLossConfig,
    compute_grpo_loss,
    estimate_kl,
    truncated_importance_weights,
    validate_grpo_config,
)
from course.scoring import get_response_log_probs
from course.tokenization import tokenize_prompt_and_output
from course.variants import KL_ESTIMATORS, PG_METHODS

# The optional (B, T') log-prob inputs, aligned with the tokenized batch.
ALIGNED_LOG_PROBS = ("old_log_probs", "ref_log_probs", "sampler_log_probs")


@runtime_checkable
class PerTokenLoss(Protocol):
    """A loss configuration that computes the whole per-token loss ℓ (b, T) of a
    micro-batch itself: notebook 11's ungraded `course.frontier.loss.FrontierLoss`. Its
    `beta` > 0 asks for log π_ref; `validate` raises ValueError naming a bad field."""

    beta: float

    def validate(self) -> None: ...

    def per_token_loss(
        self, micro: dict[str, torch.Tensor], log_probs: torch.Tensor,
        old: torch.Tensor, weights: torch.Tensor | None, ref: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


@dataclass(frozen=True)
class LossTerms:
    """What the per-token loss of a micro-batch is made of: ℓ = w · pg + β · kl."""

    pg_method: str = "none"
    cliprange: float | None = None
    kl_beta: float = 0.0
    kl_estimator: str = "k3"
    ref_model: torch.nn.Module | None = None
    tis_cap: float = 2.0
    temperature: float = 1.0
    # stage 5's loss (or notebook 11's), not pg_method's
    grpo_loss: GRPOLossConfig | PerTokenLoss | None = None


def grpo_train_step(
    model: torch.nn.Module,
    tokenizer,
    optimizer: torch.optim.Optimizer,
    gradient_accumulation_steps: int,
    max_grad_norm: float | None,
    reward_fn: Callable[[str, str], dict[str, float]],
    repeated_prompts: Sequence[str],
    rollout_responses: Sequence[str],
    repeated_ground_truths: Sequence[str],
    group_size: int,
    baseline: str = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: str = "std",
    pg_method: str = "none",
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    loss_normalization: str = "sequence",
    normalization_constant: float | None = None,
    kl_beta: float = 0.0, kl_estimator: str = "k3",
    ref_log_probs: torch.Tensor | None = None,
    ref_model: torch.nn.Module | None = None,
    sampler_log_probs: torch.Tensor | None = None,
    tis_cap: float = 2.0, temperature: float = 1.0, grpo_loss=None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor | float]]:
    """One optimizer step on B = n_groups · G rollouts (this rank's share under DDP).
    Args:
        model, optimizer: a causal LM (optionally in DistributedDataParallel) and its
            optimizer, stepped once; the gradients are zeroed before and after.
        gradient_accumulation_steps: K micro-batches of consecutive rows (1 ≤ K ≤ B);
            max_grad_norm: clip the global gradient norm to this (None: no clipping).
        reward_fn, repeated_prompts, rollout_responses, repeated_ground_truths: B
            rollouts in consecutive groups of `group_size`; baseline, advantage_eps,
            advantage_normalizer: see `compute_group_normalized_rewards`;
            pg_method, cliprange: `compute_policy_gradient_loss`'s.
        old_log_probs, ref_log_probs, sampler_log_probs: (B, T') log π_old, log π_ref
            and the sampler's log-probs of the tokenized batch (T' ≥ its T), of
            softmax(logits / τ): `temperature` τ scores π_θ (and a ref_model) the same.
        loss_normalization, normalization_constant: "sequence", "token", "constant"; C.
        kl_beta, kl_estimator, tis_cap: β ≥ 0 and estimator of the KL penalty (β > 0
            needs ref_log_probs or ref_model); the TIS cap (with sampler_log_probs).
        grpo_loss: stage 5's `GRPOLossConfig` or a `PerTokenLoss`, in pg_method's place.
    Returns (loss, metadata): the step's loss (0-dim, detached); step means of reward,
    advantage and loss metadata; `gradient_norm` (unclipped), `response_token_count`.
    """
    aligned = dict(zip(ALIGNED_LOG_PROBS,
                       (old_log_probs, ref_log_probs, sampler_log_probs)))
    terms = LossTerms(pg_method, cliprange, kl_beta, kl_estimator,
                      ref_model, tis_cap, temperature, grpo_loss)
    _validate(len(rollout_responses), repeated_prompts, repeated_ground_truths,
              group_size, gradient_accumulation_steps, loss_normalization,
              normalization_constant, terms, aligned)
    _, world_size = rank_and_world_size()
    rewards, reward_metadata = compute_rollout_rewards(
        reward_fn, rollout_responses, repeated_ground_truths)
    advantages, advantage_metadata = compute_group_normalized_rewards(
        rewards, group_size, baseline, advantage_eps, advantage_normalizer)
    tokens = tokenize_prompt_and_output(repeated_prompts, rollout_responses, tokenizer)
    batch = _aligned_batch(tokens, advantages, aligned)  # (B, T) and (B,) advantages
    # Counts of the whole step, over every rank: every micro-batch is divided by them.
    n_sequences = _sum_over_ranks(torch.tensor(len(advantages), dtype=torch.float64))
    n_tokens = _sum_over_ranks(batch["response_mask"].sum().to(torch.float64))
    statistics = LossStatistics()
    optimizer.zero_grad(set_to_none=True)
    rows_of = torch.arange(len(advantages)).tensor_split(gradient_accumulation_steps)
    for index, rows in enumerate(rows_of):  # K non-empty micro-batches
        with _accumulating(model, last=index == len(rows_of) - 1):
            micro = _microbatch(batch, rows, next(model.parameters()).device)
            per_token_loss, loss_metadata = per_token_step_loss(model, micro, terms)
            loss = calculate_loss_and_backward(
                per_token_loss, micro["response_mask"], loss_normalization,
                n_sequences, n_tokens, normalization_constant, world_size)
        _record(statistics, loss_metadata, micro["response_mask"], loss / world_size)
    metrics = {k: torch.tensor(v, dtype=torch.float64)  # float64, as summed; all ranks
               for k, v in statistics.compute().items()}
    non_finite = metrics.pop("non_finite_losses")  # over all ranks: all step, or none
    gradient_norm = _clip_and_step(model, optimizer, max_grad_norm, non_finite)
    return metrics["loss"], {**reward_metadata, **advantage_metadata, **metrics,
                             "gradient_norm": gradient_norm, "optimizer_step": 1.0,
                             "response_token_count": n_tokens}


def per_token_step_loss(
    model: torch.nn.Module, micro: dict[str, torch.Tensor], terms: LossTerms
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """ℓ = w · pg + β · kl for one micro-batch (b, T), and its metadata ((b, T) values).

    π_old is `old_log_probs` when given, else the policy itself (an on-policy step): the
    TIS weights compare it with the sampler, and "ratio_k1" weights k1 by r = π/π_old.
    """
    scored = get_response_log_probs(model, micro["input_ids"], micro["labels"],
                                    return_token_entropy=True,
                                    temperature=terms.temperature)
    log_probs, mask = scored["log_probs"], micro["response_mask"]  # (b, T)
    given_old = micro.get("old_log_probs")
    old = log_probs.detach() if given_old is None else given_old
    weights = None
    if "sampler_log_probs" in micro:
        weights = truncated_importance_weights(old, micro["sampler_log_probs"],
                                               terms.tis_cap, mask)
    if terms.grpo_loss is not None:
        loss, metadata = grpo_loss_per_token(micro, log_probs, old, weights, terms)
    else:
        loss, metadata = compute_policy_gradient_loss(
            micro["advantages"], log_probs, terms.pg_method, given_old, terms.cliprange,
            mask)
        if weights is not None:
            loss = loss * weights
        if terms.kl_beta > 0:
            ratio = torch.exp(log_probs - old.detach())
            kl = estimate_kl(log_probs, _reference_log_probs(micro, terms),
                             terms.kl_estimator, ratio=ratio)
            loss = loss + terms.kl_beta * kl
            metadata["kl_mean"] = kl
    if weights is not None:
        metadata["tis_weight_mean"] = weights
    metadata["token_entropy"] = scored["token_entropy"]
    return loss, metadata


def grpo_loss_per_token(
    micro: dict[str, torch.Tensor], log_probs: torch.Tensor, old: torch.Tensor,
    weights: torch.Tensor | None, terms: LossTerms,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """ℓ = w · pg_loss_max + β · kl of stage 5's `compute_grpo_loss` for one micro-batch
    (b, T), and its metadata. log π and log π_old are selected by the mask BEFORE the
    ratio's exp, as `compute_grpo_loss` asks of its caller (it takes no mask). A
    `PerTokenLoss` (notebook 11's, ungraded) computes the whole ℓ itself."""
    config, mask = terms.grpo_loss, micro["response_mask"].bool()  # (b, T)
    if isinstance(config, PerTokenLoss):  # where an ungraded loss enters
        ref = _reference_log_probs(micro, terms) if config.beta > 0 else None
        return config.per_token_loss(micro, log_probs, old, weights, ref)
    new = torch.where(mask, log_probs, 0)
    ratio = torch.exp(new - torch.where(mask, old.detach(), 0))  # (b, T); 1 off mask
    ref = _reference_log_probs(micro, terms) if config.beta > 0 else None
    unclipped, clipped, pg_loss_max, kl = compute_grpo_loss(
        new, ratio, micro["advantages"], ref, config, weights)
    # a token is clipped where the clip removed its gradient: DAPO's max picked the
    # clipped term; CISPO's weight hit its cap
    capped = (ratio > 1 + config.clip_higher if config.loss_fn == "cispo"
              else clipped > unclipped) & mask
    clip_count, counted = capped.sum(), mask.sum()
    metadata = {"importance_ratio_mean": ratio.detach(),
                "off_policy_loss_mean": pg_loss_max.detach(),
                "clip_fraction": clip_count / counted.clamp_min(1),
                "clip_count": clip_count, "clip_total": counted}
    if config.beta > 0:
        metadata["kl_mean"] = kl
    return pg_loss_max + config.beta * kl, metadata


def _reference_log_probs(micro: dict[str, torch.Tensor],
                         terms: LossTerms) -> torch.Tensor:
    """log π_ref (b, T): the given ones, or the reference model's (scored without
    gradient)."""
    ref = micro.get("ref_log_probs")
    if ref is None:
        with torch.no_grad():
            ref = get_response_log_probs(terms.ref_model, micro["input_ids"],
                                         micro["labels"],
                                         temperature=terms.temperature)["log_probs"]
    return ref

def _validate(batch_size, prompts, ground_truths, group_size,
              gradient_accumulation_steps, loss_normalization, normalization_constant,
              terms: LossTerms, aligned: dict) -> None:
    """A ValueError naming the argument, before anything runs."""
    if terms.pg_method not in PG_METHODS:
        raise ValueError(f"pg_method must be one of {PG_METHODS}, "
                         f"got {terms.pg_method!r}")
    if batch_size == 0:
        raise ValueError("rollout_responses must not be empty")
    if len(prompts) != batch_size or len(ground_truths) != batch_size:
        raise ValueError(
            f"repeated_prompts ({len(prompts)}), rollout_responses ({batch_size}) and "
            f"repeated_ground_truths ({len(ground_truths)}) must have the same length"
        )
    if (isinstance(group_size, bool) or not isinstance(group_size, int)
            or group_size <= 0 or batch_size % group_size):
        raise ValueError(f"group_size must be a positive int dividing the batch size "
                         f"{batch_size}, got {group_size!r}")
    steps = gradient_accumulation_steps
    if (isinstance(steps, bool) or not isinstance(steps, int)
            or not 1 <= steps <= batch_size):
        raise ValueError(f"gradient_accumulation_steps must be an int in "
                         f"[1, {batch_size}], got {steps!r}")
    if loss_normalization not in LOSS_NORMALIZATIONS:
        raise ValueError(f"loss_normalization must be one of {LOSS_NORMALIZATIONS}, "
                         f"got {loss_normalization!r}")
    constant = normalization_constant
    if loss_normalization == "constant" and not (constant is not None and constant > 0):
        raise ValueError(f"normalization_constant must be positive for 'constant', "
                         f"got {constant!r}")
    if loss_normalization != "constant" and constant is not None:
        raise ValueError(
            f"normalization_constant is only used by loss_normalization='constant' "
            f"('token' counts the step's tokens itself), got {constant!r} with "
            f"{loss_normalization!r}"
        )
    _validate_penalties(terms, aligned)


def _validate_penalties(terms: LossTerms, aligned: dict) -> None:
    if not (isinstance(terms.kl_beta, (int, float)) and terms.kl_beta >= 0):
        raise ValueError(f"kl_beta must be a number >= 0, got {terms.kl_beta!r}")
    estimator = terms.kl_estimator
    if not isinstance(estimator, str) or estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, "
                         f"got {terms.kl_estimator!r}")
    beta, beta_name = terms.kl_beta, "kl_beta"
    if terms.grpo_loss is not None:
        if isinstance(terms.grpo_loss, PerTokenLoss):
            terms.grpo_loss.validate()
        else:
            validate_grpo_config(terms.grpo_loss)
        if terms.pg_method != "none" or terms.kl_beta != 0:
            raise ValueError("grpo_loss gives the whole per-token loss: pg_method must "
                             "be 'none' and kl_beta 0 (grpo_loss.beta weighs its KL), "
                             f"got {terms.pg_method!r} and {terms.kl_beta!r}")
        beta, beta_name = terms.grpo_loss.beta, "grpo_loss.beta"
        if not (isinstance(beta, (int, float)) and beta >= 0):
            raise ValueError(f"grpo_loss.beta must be a number >= 0, got {beta!r}")
    references = (aligned["ref_log_probs"] is not None) + (terms.ref_model is not None)
    if beta > 0 and references != 1:
        raise ValueError(f"{beta_name} > 0 needs exactly one of ref_log_probs and "
                         f"ref_model, got {references}")
    temperature = terms.temperature
    if (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
            or not 0 < temperature < float("inf")):
        raise ValueError(f"temperature must be a positive finite number, "
                         f"got {temperature!r}")
    cap = terms.tis_cap
    if aligned["sampler_log_probs"] is not None and not (
            isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0):
        raise ValueError(f"tis_cap must be a positive number, got {cap!r}")


def _aligned_batch(batch: dict[str, torch.Tensor], advantages: torch.Tensor,
                   aligned: dict) -> dict:
    """The tokenized batch (B, T) with its advantages (B,) and the given log-probs cut
    to (B, T), 0 off the response mask."""
    batch = {**batch, "advantages": advantages}
    batch_size, positions = batch["input_ids"].shape
    for name, log_probs in aligned.items():
        if log_probs is None:
            continue
        if (log_probs.ndim != 2 or log_probs.shape[0] != batch_size
                or log_probs.shape[1] < positions):
            raise ValueError(
                f"{name} must be (B, T) = ({batch_size}, {positions}) aligned with the "
                f"tokenized batch, got {tuple(log_probs.shape)}"
            )
        # 0 off the response: an inf or nan at a prompt or padding position would
        # otherwise reach the gradient through exp (0·∞ = nan in backward)
        batch[name] = torch.where(batch["response_mask"].bool(),
                                  log_probs[:, :positions], 0)
    return batch


def _microbatch(batch: dict[str, torch.Tensor], rows: torch.Tensor,
                device: torch.device) -> dict:
    """Rows of the batch on `device`, without the trailing columns past every row's last
    response token."""
    mask = batch["response_mask"][rows]  # (b, T)
    width = int(mask.any(dim=0).nonzero().max()) + 1 if mask.any() else 1
    return {name: (value[rows, :width] if value.ndim == 2 else value[rows]).to(device)
            for name, value in batch.items()}


def _accumulating(model: torch.nn.Module, last: bool):
    """DDP all-reduces gradients on the last backward of the step; the others accumulate
    locally."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel) and not last:
        return model.no_sync()
    return contextlib.nullcontext()


def _sum_over_ranks(value: torch.Tensor) -> torch.Tensor:
    """`value` summed over every rank (itself outside torch.distributed)."""
    if is_distributed():
        value = value.clone()
        dist.all_reduce(value)
    return value


def _clip_and_step(model, optimizer, max_grad_norm: float | None,
                   non_finite: torch.Tensor) -> torch.Tensor:
    """Clip (an infinite bound scales by exactly 1), step unless anything is non-finite;
    the norm before clipping."""
    bound = float("inf") if max_grad_norm is None else max_grad_norm
    gradient_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), bound)
    gradient_norm = gradient_norm.detach().double().cpu()  # float64: not rounded
    if non_finite > 0 or not torch.isfinite(gradient_norm):
        optimizer.zero_grad(set_to_none=True)
        what = "loss" if non_finite > 0 else "gradient norm"
        raise RuntimeError(f"non-finite {what} in grpo_train_step; the optimizer step "
                           "was aborted and the gradients zeroed")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return gradient_norm


def _record(statistics: LossStatistics, loss_metadata: dict, mask: torch.Tensor,
            loss: torch.Tensor) -> None:
    """Fold one micro-batch's loss and metadata into the step's sums and means."""
    statistics.add_count("loss", loss.detach())  # the step's loss: a sum of its shares
    statistics.add_count("non_finite_losses", float(not torch.isfinite(loss)))
    for key, value in loss_metadata.items():
        if value.ndim == 2:  # per-token values: their mean over response tokens
            statistics.add_masked(key, value, mask)
        elif key in PG_COUNT_KEYS:
            statistics.add_count(key, value)
        elif key == "clip_fraction":
            statistics.ratio(key, "clip_count", "clip_total")
        elif key == "importance_ratio_mean":
            statistics.add_mean(key, value, loss_metadata["importance_ratio_count"])
        else:
            statistics.add_mean(key, value, mask.sum())
