"""The user-level comparison's design (studies.yaml ``user_level``, ``UserLevelPlanParams``), its plan
(reports/user_level_plan.json: the ideals computed before any run, ``UserLevelPlan``) and its table
(reports/user_level.json: per experiment a row per mechanism and audit unit, ``UserLevelTable``), as records. The flows
write them (flows/user_level_plan.py, flows/user_level.py); the report reads them (``read_plan``, ``read_table``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.io import read_json
from ..core.params import Accountant, check
from ..core.records import flattened, read_record, record

#: the keys of an ideal's summaries beside a plan row's own (``ideal_eps_lb_95_median``, ``..._p10_mc95``)
IDEAL_KEYS = r"ideal_eps_lb_[1-9][0-9]*_(median|p10|p90)(_mc95)?"


@dataclass(frozen=True)
class UserLevelPlanParams:
    """The user-level comparison's design (studies.yaml ``user_level``), fixed before its runs: one (epsilon, delta),
    q and T for every mechanism, canary users of each of ``rows`` rows, m of them, the one-run test's rule over users,
    the ideal's trials and seed, the seeds reserved for the confirming runs and the ordering predicted from the
    ideals."""

    epsilon: float
    delta: float
    sample_rate: float
    steps: int
    accountant: Accountant
    #: rows per canary user (k): the example-level ideal grows with k, the user-level one does not
    rows: tuple[int, ...]
    #: canary users, each held in or out by a fair seeded coin
    m: int
    #: "in" guesses for the highest per-user scores (no "out" guesses), fixed before any score
    k_pos: int
    confidence: float
    trials: int
    seed: int
    #: the confirming runs' seeds (registered in audit.seeds.preregistered before any run at them)
    confirmation_seeds: tuple[int, ...]
    #: the prediction stated before the runs, in words
    prediction: str
    out: str

    def problems(self):
        return (check(self.epsilon > 0 and 0 < self.delta < 1, "epsilon", "need epsilon > 0, 0 < delta < 1",
                      self.epsilon)
                + check(0 < self.sample_rate <= 1 and self.steps >= 1, "sample_rate", "need 0 < q <= 1, T >= 1",
                        self.sample_rate)
                + check(all(k >= 1 for k in self.rows) and self.rows, "rows", "must list rows per user >= 1",
                        self.rows)
                + check(0 < self.k_pos <= self.m, "k_pos", "must be in (0, m]", self.k_pos)
                + check(self.m >= 1000, "m", "must be >= 1000 canary users (the comparison's power)", self.m)
                + check(self.trials >= 500, "trials", "must be >= 500", self.trials))

    def relations(self, raw: dict) -> list[tuple[str, str]]:
        """The confirming runs' seeds stand in audit.seeds.preregistered (committed before any run at them)."""
        from ...shared.core.params import section_of

        missing = sorted(set(self.confirmation_seeds) - set(section_of(raw, "audit.seeds.preregistered") or ()))
        return [("user_level.confirmation_seeds", f"must stand in audit.seeds.preregistered (missing {missing})")] \
            if missing else []



@record
class IdealRow:
    """The ideal user-level audit under one DP unit at k rows per canary user: the median right guesses and the
    bound's median, 10th and 90th percentile over the simulated audits, each with its Monte Carlo interval."""

    unit: str  # example | user
    rows: int
    m: int
    k_pos: int
    median_correct: float
    summaries: dict[str, float | list[float]] = flattened(IDEAL_KEYS)


@record
class Ideals:
    """At the design's (epsilon, delta, q, T): sigma from the accountant, the cap r right guesses can show, and the
    ideal of every (unit, k)."""

    epsilon: float
    delta: float
    sample_rate: float
    steps: int
    noise_multiplier: float
    accountant: str
    m: int
    k_pos: int
    confidence: float
    trials: int
    cap_eps_lb: float
    rows: list[IdealRow]


@record
class UserLevelPlan:
    design: UserLevelPlanParams
    design_commit: str | None
    ideals: Ideals
    assumption: str


@record
class ComparisonRow:
    """One mechanism's test at one audit unit in one experiment (as metrics.json names its parts): the accountant's
    epsilon (None without DP), the test's counts and bound, its ideal's median and the count's percentile (DP only),
    the per-unit AUROC, the validation perplexity, the seeds and their status, the design's commit."""

    mechanism: str
    unit: str
    epsilon: float | None
    delta: float
    k: int
    m: int
    r: int
    v: int
    eps_lb_95: float
    ideal_eps_lb_95_median: float | None
    ideal_percentile: float | None
    canary_user_auroc: float | None
    canary_user_auroc_ci95: list[float] | None
    members: int
    non_members: int
    valid_perplexity: float | None
    seeds: list[int]
    seed_status: str
    design_commit: str | None


@record
class UserLevelExperiment:
    experiment: str
    commit: str
    k: int
    seed: int
    params: str  # its params.yaml and dvc.lock, kept beside the table
    lock: str
    rows: list[ComparisonRow]


@record
class UserLevelTable:
    design: UserLevelPlanParams
    design_commit: str | None
    recipe: str
    experiments: list[UserLevelExperiment]


def read_plan(path: Path) -> UserLevelPlan:
    return read_record(UserLevelPlan, read_json(path, "python -m flows.user_level_plan"), str(path))


def read_table(path: Path) -> UserLevelTable:
    return read_record(UserLevelTable, read_json(path, "python -m flows.user_level"), str(path))
