"""The keyword arguments `course.loop.train` calls the train step with, from a `TrainConfig`.

`grpo_train_step` takes its loss three ways: stage 4's `pg_method` with `cliprange` and the KL
penalty, stage 5's `GRPOLossConfig` (dapo, cispo: open-instruct's loss, Yu et al. 2025, arXiv
2503.14476; MiniMax 2025, arXiv 2506.13585), or a `FrontierLoss` (`course.frontier.loss`: SAPO,
GMPO, DPPO, the dual clip, floored CISPO, the ratio against the sampler, the outlier mask), both
through its `grpo_loss` argument and with the same fields: `loss_fn` is the run's `pg_method`
(grpo is dapo with ε_high = ε_low), `clip_lower` its `cliprange`, `clip_higher` its `clip_higher`
(0: `cliprange`), `kl_estimator` its own, `beta` its `kl_beta`. Its advantages take the baseline
and normalizer as given, but for MaxRL (arXiv 2602.02710), whose groups of one
`course.frontier.maxrl` guards. Stage 3's ungraded options (RLOO's leave_one_out, REINFORCE++'s
batch: `course.advantages`) run only where the stage 3 that trains computes them
(`advantage_option_problem`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course.advantages import compute_group_normalized_rewards
from course.frontier.loss import FrontierLoss
from course.frontier.maxrl import maxrl_train_arguments
from course.loop.train_config import TrainConfig, frontier_field
from course.off_policy import GRPOLossConfig
from course.variants import BASELINES, GRPO_LOSS_FNS, NORMALIZERS

# the groups (1, 0, 0, 1) and (1, 0, 0, 0), worked by hand in `course.advantages`
PROBE_REWARDS = (1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0)


def loss_arguments(config: TrainConfig) -> dict:
    """The train step's loss arguments for `config.pg_method`: stage 4's loss with its ε and the
    KL penalty, or a loss configuration (`grpo_loss_config`) that carries the clip bounds, the
    KL estimator and β itself."""
    if frontier_field(config) is not None or config.pg_method in GRPO_LOSS_FNS:
        return {"pg_method": "none", "kl_beta": 0.0, "grpo_loss": grpo_loss_config(config)}
    cliprange = config.cliprange if config.pg_method in ("grpo", "gspo", "cispo") else None
    return {"pg_method": config.pg_method, "cliprange": cliprange, "kl_beta": config.kl_beta,
            "kl_estimator": config.kl_estimator}


def grpo_loss_config(config: TrainConfig) -> GRPOLossConfig | FrontierLoss:
    """The loss configuration of `config`: stage 5's `GRPOLossConfig` for dapo and cispo, or, when
    an option of notebook 11 is set (`frontier_field`), the `FrontierLoss` (`course.frontier.loss`)
    whose dapo carries the dual clip and whose dppo takes prime-rl's τ = 1e-3 of (log r)²."""
    shared = {"loss_fn": "dapo" if config.pg_method == "grpo" else config.pg_method,
              "clip_lower": config.cliprange, "clip_higher": config.clip_higher or config.cliprange,
              "kl_estimator": config.kl_estimator, "beta": config.kl_beta}
    if frontier_field(config) is None:
        return GRPOLossConfig(**shared)
    dppo = config.pg_method == "dppo"
    return FrontierLoss(**shared, dual_clip=config.dual_clip or None,
                        cispo_floor=config.cispo_floor, tau_pos=config.sapo_tau_pos,
                        tau_neg=config.sapo_tau_neg,
                        trust_region=config.trust_region if dppo else 0.0,
                        ratio_kl=1e-3 if dppo else 0.0, ratio_against=config.ratio_against,
                        outlier_low=config.outlier_low or None,
                        outlier_high=config.outlier_high or None)


def advantage_arguments(config: TrainConfig) -> dict:
    """The train step's baseline and normalizer: MaxRL (mean baseline, mean normalizer) guarded for
    a group of one as `course.frontier.maxrl` says (A = r); the others as given."""
    if (config.baseline, config.advantage_normalizer) == ("mean", "mean"):
        return maxrl_train_arguments(config.group_size)
    return {"baseline": config.baseline, "advantage_normalizer": config.advantage_normalizer}


def advantage_option_problem(stage_three: Callable, config: TrainConfig,
                             world_size: int) -> tuple[str, str] | None:
    """(field, why) when the learner's `stage_three` (their `compute_group_normalized_rewards`)
    cannot train with `config`'s ungraded option; None when it can, or when none is asked for. It
    must run on `PROBE_REWARDS` and give the reference's advantages (where the reference is
    revealed); a "batch" of one rank's rows cannot be told from the whole step's there, so that
    option runs with their stages on one process only."""
    if config.baseline in BASELINES and config.advantage_normalizer in NORMALIZERS:
        return None
    field = "baseline" if config.baseline not in BASELINES else "advantage_normalizer"
    option = getattr(config, field)  # ConfigError's message follows the field's name (its flag)
    if world_size > 1 and config.advantage_normalizer == "batch":
        return "advantage_normalizer", (
            "batch with your stages runs on one process only: its "
            "statistics are the step's whole batch over every rank (the reference's are exact)")
    rewards = torch.tensor(PROBE_REWARDS, dtype=torch.float64)
    arguments = {"group_size": 4, "baseline": config.baseline, "advantage_eps": 0.0,
                 "advantage_normalizer": config.advantage_normalizer}
    try:
        expected = compute_group_normalized_rewards(rewards, **arguments)[0]
    except RuntimeError:  # a student edition whose stage 3 is not revealed: nothing to compare
        expected = None
    try:
        advantages = stage_three(rewards.clone(), **arguments)[0]
        values = torch.as_tensor(advantages, dtype=torch.float64).reshape(-1)  # (8,)
        agrees = torch.allclose(values, values if expected is None else expected, atol=1e-4)
    except Exception as error:  # the learner's code: any failure is the answer
        return field, (f"{option} is an optional extension of stage 3 that your "
                       f"compute_group_normalized_rewards (03_advantages) does not take "
                       f"({type(error).__name__}: {error}); write it there, or train with the "
                       "reference's stages")
    if agrees:
        return None
    return field, (f"{option}: your compute_group_normalized_rewards (03_advantages) gives "
                   f"{advantages.tolist()} for the rewards {list(PROBE_REWARDS)} (G = 4, "
                   f"eps = 0), not the reference's {expected.tolist()}")
