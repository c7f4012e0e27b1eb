"""Params of ``audit`` (the ``audit`` section)."""
from __future__ import annotations

from dataclasses import dataclass

from ..shared.core.params import Accountant, check, missing_keys, run_names, section_of
from .user_level import UserAuditParams


@dataclass(frozen=True)
class GuessRule:
    """A run's own pre-registered guessing rule (audit.primary.runs.<run>)."""

    k_pos: int
    k_neg: int

    def problems(self):
        return (check(self.k_pos >= 0 and self.k_neg >= 0, "k_pos", "counts must be >= 0", (self.k_pos, self.k_neg))
                + check(self.k_pos + self.k_neg > 0, "k_pos", "k_pos + k_neg must be > 0", self.k_pos + self.k_neg))


@dataclass(frozen=True)
class PrimaryParams:
    """The one pre-registered test of every run with canaries: its bounds are the run's headline epsilon-hat.
    To be fixed before any score is seen (the bound assumes it); everything else the audit computes is exploratory."""

    #: membership score (an attack of attack.attacks / attack.runs.<run>)
    attack: str
    #: canary kind (one of canaries.kinds)
    kind: str
    #: "in" guesses (the k_pos highest scores) and "out" guesses (the k_neg lowest)
    k_pos: int
    k_neg: int
    confidences: tuple[float, ...]
    #: the rule of every run without a DP guarantee (no dp.enabled; an external run with no claim): its canaries
    #: separate strongly, and 100 guesses can prove at most 3.47 at 95%; null: k_pos / k_neg
    no_dp: GuessRule | None
    #: runs with their own guessing rule (same attack, kind and confidences), over k_pos / k_neg and no_dp
    runs: dict[str, GuessRule]

    def rule(self, run: str, dp: bool = True) -> tuple[int, int]:
        """(k_pos, k_neg) pre-registered for ``run``: its own rule, else (a run without DP) ``no_dp``, else the
        default. Whether a run holds DP is fixed by params (its dp.enabled or external claim), never by scores."""
        r = self.runs.get(run) or (None if dp else self.no_dp)
        return (r.k_pos, r.k_neg) if r else (self.k_pos, self.k_neg)

    def problems(self):
        return (
            check(bool(self.attack), "attack", "must name a membership attack", self.attack)
            + check(bool(self.kind), "kind", "must name a canary kind", self.kind)
            + check(self.k_pos >= 0, "k_pos", "must be >= 0", self.k_pos)
            + check(self.k_neg >= 0, "k_neg", "must be >= 0", self.k_neg)
            + check(self.k_pos + self.k_neg > 0, "k_pos", "k_pos + k_neg must be > 0", self.k_pos + self.k_neg)
            + check(len(self.confidences) > 0 and all(0 < c < 1 for c in self.confidences), "confidences",
                    "needs at least one, each in (0, 1)", self.confidences)
        )


@dataclass(frozen=True)
class ExploratoryParams:
    """The exploratory family: every membership attack x canary kind x (k_pos, k_neg) of this grid, each bound
    tested at 1 - (1 - c) / N (Bonferroni over the N distinct tests), at the primary's confidences. Attacks declared
    at registration to rank a kind's canaries identically (``ranks_like``) are one test."""

    k_pos: tuple[int, ...]
    k_neg: tuple[int, ...]

    def problems(self):
        return (check(len(self.k_pos) > 0 and len(self.k_neg) > 0, "k_pos", "k_pos and k_neg need a value each",
                      (self.k_pos, self.k_neg))
                + check(all(k >= 0 for k in self.k_pos + self.k_neg), "k_pos", "counts must be >= 0",
                        (self.k_pos, self.k_neg))
                + check(any(a + b > 0 for a in self.k_pos for b in self.k_neg), "k_pos",
                        "some k_pos + k_neg must be > 0", (self.k_pos, self.k_neg)))


@dataclass(frozen=True)
class PlannedRegime:
    """A DP regime not run here (e.g. the GPU preset) whose ceiling the report shows: sigma from the accountant."""

    sample_rate: float
    steps: int
    epsilon: float
    delta: float
    accountant: Accountant
    #: canaries of the primary kind (m)
    canaries: int

    def problems(self):
        return (check(0 < self.sample_rate <= 1, "sample_rate", "must be in (0, 1]", self.sample_rate)
                + check(self.steps >= 1, "steps", "must be >= 1", self.steps)
                + check(self.epsilon > 0, "epsilon", "must be > 0", self.epsilon)
                + check(0 < self.delta < 1, "delta", "must be in (0, 1)", self.delta)
                + check(self.canaries >= 1, "canaries", "must be >= 1", self.canaries))


@dataclass(frozen=True)
class CeilingParams:
    """The ideal one-run audit of each DP run under the linear last-iterate model (simulated, seeded)."""

    trials: int
    seed: int
    planned: dict[str, PlannedRegime]

    def problems(self):
        return check(self.trials >= 200, "trials", "must be >= 200 (the quantiles need them)", self.trials)


@dataclass(frozen=True)
class SeedRegistry:
    """Which seeds may carry a headline (docs/method.md, "Seeds have a status"). A seed any design choice saw
    (score, rule, canary budget, profile, the pooled rule) is a development seed for good; a preregistered seed was
    committed before any run at it existed. A bound is a confirmation only when its seed set's first recorded run
    (``ledger``, stages/audit/ledger.py) is this design, or the ledger has none and every seed is preregistered."""

    development: tuple[int, ...]
    preregistered: tuple[int, ...]
    #: the seed ledger (git-tracked, append-only, written by flows/pooled_audit.py): every recorded run of a seed set
    ledger: str

    def problems(self):
        both = sorted(set(self.development) & set(self.preregistered))
        return check(not both, "preregistered", "must not list a development seed", both)


@dataclass(frozen=True)
class SanityCheckParams:
    enabled: bool
    #: family-wise level: each KS test runs at alpha / (kinds x statistics)
    alpha: float

    def problems(self):
        return check(0 < self.alpha < 1, "alpha", "must be in (0, 1)", self.alpha)


@dataclass(frozen=True)
class ShiftCheckParams:
    #: family-wise level over the distinct non-randomised pools: each blind baseline is tested at alpha / pools
    alpha: float
    #: the guard's stated power: the smallest blind AUROC it flags with this probability at each pool's size
    power: float
    #: simulated pools per AUROC on the grid (binormal scores, the check's own test); seeded
    power_trials: int
    power_seed: int

    def problems(self):
        return (check(0 < self.alpha < 1, "alpha", "must be in (0, 1)", self.alpha)
                + check(0 < self.power < 1, "power", "must be in (0, 1)", self.power)
                + check(self.power_trials >= 100, "power_trials", "must be >= 100", self.power_trials))


@dataclass(frozen=True)
class AuditParams:
    out: str
    #: ROC curve points of every membership score (run, attack, group), drawn by the report
    roc_out: str
    primary: PrimaryParams
    exploratory: ExploratoryParams
    ceiling: CeilingParams
    #: null = a DP run's own delta (so eps_hat and the accountant's eps are at the same delta);
    #: runs without DP use fallback_delta
    delta: float | None
    fallback_delta: float
    sanity_check: SanityCheckParams
    shift_check: ShiftCheckParams
    fprs: tuple[float, ...]
    bootstrap: int
    #: fewer members or non-members than this: no bootstrap interval, an exact permutation p-value instead
    min_per_side: int
    seed: int
    #: the seeds' status (development / preregistered)
    seeds: SeedRegistry
    #: run -> the pooled test's rule over that run and its replicas (replicas.sets): the k_pos highest and k_neg
    #: lowest primary scores within each run (same attack, kind and confidences as audit.primary)
    pooled: dict[str, GuessRule]
    #: the user-level one-run test of every run trained on the audit users (canaries.audit_users)
    user: UserAuditParams

    @property
    def confidences(self) -> tuple[float, ...]:
        return self.primary.confidences

    @property
    def grid(self) -> list[tuple[int, int]]:
        """The exploratory (k_pos, k_neg) pairs, in params order, without the empty guess."""
        return [(a, b) for a in self.exploratory.k_pos for b in self.exploratory.k_neg if a + b > 0]

    def problems(self):
        return (
            check(self.delta is None or 0 <= self.delta < 1, "delta", "must be in [0, 1)", self.delta)
            + check(0 <= self.fallback_delta < 1, "fallback_delta", "must be in [0, 1)", self.fallback_delta)
            + check(len(self.fprs) > 0 and all(0 < f < 1 for f in self.fprs), "fprs",
                    "needs at least one, each in (0, 1)", self.fprs)
            + check(self.bootstrap >= 0, "bootstrap", "must be >= 0", self.bootstrap)
            + check(self.min_per_side >= 2, "min_per_side", "must be >= 2", self.min_per_side)
        )

    def relations(self, raw: dict) -> list[tuple[str, str]]:
        """The primary test scores a configured canary kind and its per-run and pooled rules name configured runs."""
        kinds = section_of(raw, "canaries.kinds")
        return ([("audit.primary.kind", f"must be one of canaries.kinds ({', '.join(map(str, kinds))}) "
                                        f"(got {self.primary.kind!r})")]
                if isinstance(kinds, list) and self.primary.kind not in kinds else []) \
            + missing_keys(self.primary.runs, run_names(raw), "audit.primary.runs", "run in runs") \
            + missing_keys(self.pooled, run_names(raw), "audit.pooled", "run in runs")
