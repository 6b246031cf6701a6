"""The keyword arguments `course.loop.train` calls the train step with, from a `TrainConfig`.

`grpo_train_step` takes its loss three ways: stage 4's `pg_method` with `cliprange` and the KL
penalty, stage 5's `GRPOLossConfig` (dapo, cispo: open-instruct's loss, Yu et al. 2025, arXiv
2503.14476; MiniMax 2025, arXiv 2506.13585), or a `FrontierLoss` (`course.frontier.loss`: SAPO,
GMPO, DPPO, the dual clip, floored CISPO, the ratio against the sampler, the outlier mask), both
through its `grpo_loss` argument and with the same fields: `loss_fn` is the run's `pg_method`
(grpo is dapo with ε_high = ε_low), `clip_lower` its `cliprange`, `clip_higher` its `clip_higher`
(0: `cliprange`), `kl_estimator` its own, `beta` its `kl_beta`. Its advantages take the baseline
and normalizer as given, but for MaxRL (arXiv 2602.02710), whose groups of one
`course.frontier.maxrl` guards.
"""

from __future__ import annotations

from course.frontier.loss import FrontierLoss
from course.frontier.maxrl import maxrl_train_arguments
from course.loop.train_config import TrainConfig, frontier_field
from course.off_policy import GRPOLossConfig
from course.variants import GRPO_LOSS_FNS


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
