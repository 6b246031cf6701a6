"""Notebook 09's repair of Run B: a search for the largest learning rate that still learns.

Run B of the failure lab (`failure_runs` "high_lr") is the healthy run with another AdamW learning
rate, and it collapses. The healthy run's rate learns. A probe trains Run B's configuration at one
rate for `REPAIR_STEPS` steps (`failure_runs.rerun`'s settings: CPU, seed 0) and measures the
held-out accuracy of the warm start and of the probe's policy on the same 100 problems; the rate
learns where the policy did not get worse (`learns`). `LearningRateSearch` keeps the bracket, the
largest rate known to learn and the smallest known not to, takes each probe strictly inside
it (bisection: one probe halves the bracket on a log scale), records it, and refuses a probe it
cannot check. A probe takes 7 to 13 s of one CPU thread (benchmarks/README.md, "Notebook 09's
failure-mode lab").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from course.lab.failure_runs import HEALTHY, REPAIR_STEPS, RUNS, rerun

# (learns, does not): the healthy run's rate (its recording learns) and Run B's (it collapses)
START = (HEALTHY.lr, RUNS["high_lr"]["lr"])
# probes of the notebook's search: 4 halvings on a log scale narrow START's factor of 30 to
# 30 ** (1 / 16) = 1.24
SEARCH_PROBES = 4


@dataclass(frozen=True)
class Probe:
    """One probe: its learning rate, its records, the held-out accuracy (sampled, 100 problems)
    of the warm start and after its last step, and the verdict `learns` gives."""

    lr: float
    records: list[dict]
    accuracy_before: float
    accuracy_after: float

    @property
    def learned(self) -> bool:
        return learns(self.accuracy_before, self.accuracy_after)


def learns(accuracy_before: float, accuracy_after: float) -> bool:
    """The verdict on a probe: its policy answers at least as many held-out problems right as the
    warm start did (the same problems, the same sampling seed). A rate that collapses ends far
    below (Run B: 0 after one step), one that learns ends above."""
    return accuracy_after >= accuracy_before


def train_probe(lr: float, steps: int = REPAIR_STEPS, implementations=None) -> Probe:
    """Run B's configuration at learning rate `lr` for `steps` steps (CPU, seed 0, one held-out
    evaluation before the first step and one after the last) on `implementations`' stages
    (default: the reference's; the notebook passes the learner's): its `Probe`."""
    records, summary = rerun("high_lr", steps, implementations, lr=lr)
    return Probe(lr, records, summary["accuracy_before"], summary["accuracy_after"])


class LearningRateSearch:
    """The bracket (`learns_at`, `fails_at`) and the probes that narrowed it, in order."""

    def __init__(self, learns_at: float = START[0], fails_at: float = START[1],
                 train: Callable[[float], Probe] = train_probe):
        if not 0 < learns_at < fails_at:
            raise ValueError(f"learns_at, fails_at: need 0 < learns_at < fails_at, got "
                             f"{learns_at!r}, {fails_at!r}")
        self.learns_at, self.fails_at = learns_at, fails_at
        self.train = train
        self.probes: list[Probe] = []

    def probe(self, lr: float) -> Probe:
        """Train one probe at `lr` and narrow the bracket by its verdict. Refused with ValueError
        (nothing trained): a rate that is not a number above 0, or one outside the open bracket,
        whose verdict the bracket already gives or which could not narrow it."""
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr):
            raise ValueError(f"lr: expected a finite number, got {lr!r}")
        if not self.learns_at < lr < self.fails_at:
            raise ValueError(f"lr: {lr:g} is not strictly between the rate known to learn "
                             f"({self.learns_at:g}) and the one known not to learn "
                             f"({self.fails_at:g}): a probe there cannot narrow the bracket")
        probe = self.train(float(lr))
        self.probes.append(probe)
        if probe.learned:
            self.learns_at = probe.lr
        else:
            self.fails_at = probe.lr
        return probe

    def table(self) -> str:
        """One line per probe: rate, held-out accuracy before and after, verdict; then the bracket."""
        lines = [f"{'lr':>9} {'held-out before':>15} {'after':>6}  verdict"]
        lines += [f"{p.lr:>9.3g} {p.accuracy_before:>15.2f} {p.accuracy_after:>6.2f}  "
                  f"{'learns' if p.learned else 'does not learn'}" for p in self.probes]
        lines.append(f"bracket: learns at {self.learns_at:.3g}, does not at "
                     f"{self.fails_at:.3g} (a factor {self.fails_at / self.learns_at:.2f})")
        return "\n".join(lines)
