"""Params of ``audit`` (the ``audit`` section)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..core.params import check


@dataclass(frozen=True)
class SweepParams:
    """Optional grid of guess counts; the best bound is reported with a Bonferroni correction."""

    k_pos: tuple[int, ...]
    k_neg: tuple[int, ...]

    def problems(self):
        return check(all(k >= 0 for k in self.k_pos + self.k_neg), "k_pos", "counts must be >= 0", self.k_pos)


@dataclass(frozen=True)
class IIDGuardParams:
    enabled: bool
    #: family-wise level: each KS test runs at alpha / (kinds x statistics)
    alpha: float

    def problems(self):
        return check(0 < self.alpha < 1, "alpha", "must be in (0, 1)", self.alpha)


@dataclass(frozen=True)
class AuditParams:
    out: str
    #: ROC curve points of every membership score (run, attack, group), drawn by the report
    roc_out: str
    #: number of "in" guesses (highest scores) and "out" guesses (lowest scores)
    k_pos: int
    k_neg: int
    #: null = a DP run's own delta (so eps_hat and the accountant's eps are at the same delta);
    #: runs without DP use fallback_delta
    delta: Optional[float]
    fallback_delta: float
    confidences: tuple[float, ...]
    sweep: SweepParams
    iid_guard: IIDGuardParams
    fprs: tuple[float, ...]
    bootstrap: int
    seed: int

    def problems(self):
        return (
            check(self.k_pos >= 0, "k_pos", "must be >= 0", self.k_pos)
            + check(self.k_neg >= 0, "k_neg", "must be >= 0", self.k_neg)
            + check(self.k_pos + self.k_neg > 0, "k_pos", "k_pos + k_neg must be > 0", self.k_pos + self.k_neg)
            + check(self.delta is None or 0 <= self.delta < 1, "delta", "must be in [0, 1)", self.delta)
            + check(0 <= self.fallback_delta < 1, "fallback_delta", "must be in [0, 1)", self.fallback_delta)
            + check(len(self.confidences) > 0 and all(0 < c < 1 for c in self.confidences), "confidences",
                    "needs at least one, each in (0, 1)", self.confidences)
            + check(len(self.fprs) > 0 and all(0 < f < 1 for f in self.fprs), "fprs",
                    "needs at least one, each in (0, 1)", self.fprs)
            + check(self.bootstrap >= 0, "bootstrap", "must be >= 0", self.bootstrap)
        )
