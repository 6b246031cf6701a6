"""Training metrics that stay right under micro-batching: a weighted accumulator and a log-prob
probe.

A mean of per-micro-batch means is wrong when micro-batches hold different numbers of tokens (the
same mistake as the loss bug in `aggregation`, in the logs instead of the gradients).
`LossStatistics` keeps (Σ value, Σ weight) per metric and divides once, after every micro-batch and
every rank. `compare_logprobs` measures how far a sampler's log-probs (e.g. a bf16 inference engine)
are from the trainer's on the same tokens. Reference: open-instruct `open_instruct/metrics.py`
(LossStatistics, masked_mean) and `compare_logprobs` in its GRPO trainer.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from course.distributed import is_distributed


class LossStatistics:
    """Weighted means and plain counts accumulated over micro-batches, reduced over ranks.

    Means: `add_mean(name, mean, weight)` or `add_masked(name, values, mask)` accumulate
    Σ mean·weight and Σ weight. Counts: `add_count(name, count)` accumulates a plain sum.
    `ratio(name, numerator, denominator)` defines a metric as a ratio of two counts (clip fraction).
    """

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._weights: dict[str, torch.Tensor] = {}
        self._counts: dict[str, torch.Tensor] = {}
        self._ratios: dict[str, tuple[str, str]] = {}

    def add_mean(self, name: str, mean: torch.Tensor | float, weight: torch.Tensor | float) -> None:
        mean = torch.as_tensor(mean, dtype=torch.float64).detach().cpu()
        weight = torch.as_tensor(weight, dtype=torch.float64).detach().cpu()
        self._sums[name] = self._sums.get(name, torch.zeros((),
                                                            dtype=torch.float64)) + mean * weight
        self._weights[name] = self._weights.get(name, torch.zeros((), dtype=torch.float64)) + weight

    def add_masked(self, name: str, values: torch.Tensor, mask: torch.Tensor) -> None:
        """Accumulate the masked sum of `values` (B, T) with weight Σ mask."""
        mask = mask.to(torch.float64)
        weight = mask.sum()
        total = (values.detach().to(torch.float64) * mask).sum()
        self.add_mean(name, total / weight.clamp_min(1), weight)

    def add_count(self, name: str, count: torch.Tensor | float) -> None:
        count = torch.as_tensor(count, dtype=torch.float64).detach().cpu()
        self._counts[name] = self._counts.get(name, torch.zeros((), dtype=torch.float64)) + count

    def ratio(self, name: str, numerator: str, denominator: str) -> None:
        self._ratios[name] = (numerator, denominator)

    def compute(self, all_reduce: bool | None = None) -> dict[str, float]:
        """The metrics as floats; sums are all-reduced over ranks first when distributed."""
        names = sorted(self._sums) + sorted(self._counts)
        stacked = torch.stack(
            [self._sums[n] for n in sorted(self._sums)]
            + [self._weights[n] for n in sorted(self._sums)]
            + [self._counts[n] for n in sorted(self._counts)]
        ) if names else torch.zeros(0, dtype=torch.float64)
        if (all_reduce if all_reduce is not None else is_distributed()) and stacked.numel():
            dist.all_reduce(stacked)
        n_means = len(self._sums)
        result = {}
        for i, name in enumerate(sorted(self._sums)):
            weight = stacked[n_means + i]
            result[name] = (stacked[i] / weight).item() if weight > 0 else 0.0
        for j, name in enumerate(sorted(self._counts)):
            result[name] = stacked[2 * n_means + j].item()
        for name, (num, den) in self._ratios.items():
            result[name] = result[num] / result[den] if result.get(den, 0.0) > 0 else 0.0
        return result


def compare_logprobs(
    sampler_log_probs: torch.Tensor, trainer_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """How far the sampler's log-probs are from the trainer's on the same sampled tokens.

    Args:
        sampler_log_probs: (B, T) log q of the sampled tokens (the engine that generated them);
            NaN entries (tokens the sampler did not report) are ignored.
        trainer_log_probs: (B, T) log p of the same tokens under the trainer's forward.
        response_mask: (B, T) 0/1.

    Returns:
        `logprob_diff_mean`, `logprob_diff_max`: mean / max of |log p − log q| over response tokens;
        `reverse_kl`: k3 estimate of KL(q ‖ p) from the sampler's own samples,
        mean of exp(δ) − 1 − δ with δ = log p − log q (≥ 0 per token; Schulman 2020).
    """
    if (
        sampler_log_probs.shape != trainer_log_probs.shape
        or response_mask.shape != trainer_log_probs.shape
    ):
        raise ValueError(
            f"sampler_log_probs {tuple(sampler_log_probs.shape)}, trainer_log_probs "
            f"{tuple(trainer_log_probs.shape)} and response_mask {tuple(response_mask.shape)} must "
            "match"
        )
    with torch.no_grad():
        sampler = sampler_log_probs.detach().double()
        trainer = trainer_log_probs.detach().double()
        valid = response_mask.bool() & ~torch.isnan(sampler)
        delta = torch.where(valid, trainer - sampler, torch.zeros_like(trainer))  # (B, T)
        count = valid.sum().clamp_min(1)
        abs_diff = delta.abs()
        return {
            "logprob_diff_mean": (abs_diff.sum() / count).item(),
            "logprob_diff_max": abs_diff.max().item() if abs_diff.numel() else 0.0,
            "reverse_kl": ((torch.expm1(delta) - delta) * valid).sum().div(count).item(),
        }
