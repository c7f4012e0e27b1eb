"""The public contract of the audit stage, read by the report (and by ``dvc metrics``).

* ``reports/metrics.json`` (``audit.out``): a ``Metrics`` record, written and read only through
  ``write_metrics``/``read_metrics``; ``schema_version`` changes whenever its shape does;
* ``reports/roc.parquet`` (``audit.roc_out``, schema ROC): the ROC curve of every membership score.

Which FPRs and confidences appear depends on ``audit.fprs`` and ``audit.primary.confidences``: readers ask
``fpr_keys``/``bound_keys`` instead of assuming a key exists. A run's headline bound is its pre-registered
test, ``runs.<run>.audit_primary``; ``runs.<run>.audit_exploratory`` holds every other test, each
Bonferroni-corrected over the family, and is never a headline.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypedDict

import pyarrow as pa

from ..core.errors import DataError
from ..core.io import read_json, read_table, write_json, write_table

# 2: audit_primary / audit_exploratory / planned; 3: blind, shift_check, sanity_check, trainable,
# canary_users_by_length; 4: canary_response, canary_gradients, audit_params.primary.runs; 5: intervals None below
# audit.min_per_side (exact p instead), minus_blind, blind pools by fingerprint with verdict and power
# (shift_check.pools); 7: training holds public quantities only (no n_examples, expected_batch_size), no
# canary_gradients (the run's auditor.json); 8: attacks_skipped (the default list's attacks a run cannot have),
# audit_params.primary.no_dp (the rule of runs without DP); 9: canary_response.attacks.<attack>.member_shift
METRICS_VERSION = 9
PRODUCER = "audit"

#: item groups whose membership is not randomised (text rows, users): ROC metrics only, no one-run bound;
#: every other group is a canary kind; ``audit_users`` rows share one coin per user (canaries.audit_users), so they are
#: tested over users (``audit_user``), never as examples
NON_CANARY_GROUPS = ("text", "users", "canary_users", "audit_users")


class Interval(TypedDict):
    value: float
    ci95: list[float]


class Primary(TypedDict, total=False):
    """The pre-registered test (audit.primary) of a run with canaries."""

    attack: str
    kind: str
    m: int
    k_pos: int
    k_neg: int
    r: int
    v: int
    delta: float
    precision: float
    # per audit.primary.confidences, e.g. for 0.95:
    #   eps_lb_95 (Steinke et al., assumption-free), gdp_eps_lb_95 and gdp_mu_lb_95 (Gaussian trade-off assumed)
    # DP runs also: accountant_epsilon, last_iterate_epsilon, ideal_eps_lb_95_{median,p10,p90},
    #   ideal_gdp_eps_lb_95_{median,p10,p90}, ideal_trials, ideal_correct_median, ideal_percentile; each ideal quantile
    #   with its Monte Carlo error (_mcse) and interval (_mc95)


class Exploratory(TypedDict):
    """Every attack x canary kind x guesses test; eps_lb_<c> of each holds at c family-wise (Bonferroni)."""

    family_size: int
    correction: str
    per_test_confidence: dict[str, float]  # eps_lb_<c> -> 1 - (1 - c) / family_size
    identical_rankings: list[dict[str, Any]]  # {kind, attacks}: one test for all of them
    tests: list[dict[str, Any]]  # attack, same_ranking, kind, k_pos, k_neg, m, r, v, eps_lb_<c>
    best: dict[str, dict[str, Any]]  # eps_lb_<c> -> the largest corrected bound and its test


class GroupMetrics(TypedDict, total=False):
    members: int
    non_members: int
    auroc: float
    auroc_ci95: list[float] | None  # None: fewer than audit.min_per_side on a side (no interval formed)
    auroc_p_exact: float  # only then: exact one-sided permutation p-value of AUROC > 0.5
    tpr_at_fpr: dict[str, Interval]  # key: f"{fpr:g}", e.g. "0.01"
    minus_blind: dict[str, Any]  # non-randomised pools: AUROC - blind AUROC on the same items, paired 95% interval


#: the shift check's verdict per distinct pool (stages/audit/shift.py) and how the report words it
VERDICTS = {"shift": "INVALID MIA: distribution shift", "too_weak": "guard too weak at this size",
            "no_shift": "no shift detected"}


class RunMetrics(TypedDict, total=False):
    privacy: dict[str, Any]  # the run's privacy record (stages.finetune)
    training: dict[str, Any]  # steps, sample_rate, expected exposures, n_population, divisor (public only)
    trainable: dict[str, Any]  # paradigm, lora_r/targets, virtual_tokens, new_token_rows, secret_token_rows, parameters
    dataset: str
    utility: dict[str, Any]  # valid_nll, valid_perplexity
    attacks: dict[str, dict[str, GroupMetrics]]  # membership attack -> item group -> metrics
    attacks_skipped: dict[str, str]  # attack of the default list the run cannot have -> why (stages.attack.run)
    user_score: str  # runs with user inference: the per-example score it averaged per user (attack.user_score)
    audit_primary: Primary | None  # None: the run has no canaries
    audit_exploratory: Exploratory | None
    #: runs trained on the audit users (finetune.user_canaries): the user-level one-run test (audit/user_level.py)
    audit_user: dict[str, Any]
    exposure: dict[str, dict[str, Any]]  # format (and "all") -> exposure summary
    canary_users_by_length: dict[str, dict[str, GroupMetrics]]  # attack -> substring length -> metrics
    #: attack -> "<length>:<documents>" -> metrics: a length's held-in canary users trained on that many documents
    #: ("all": every one) against all its held-out ones; only where canaries.users.documents varies them
    canary_users_by_documents: dict[str, dict[str, GroupMetrics]]
    blind: dict[str, dict[str, Any]]  # pool (text, users) -> blind baseline AUROC, p_value, flagged, differences
    memorization: dict[str, dict[str, Any]]  # vmr/air/acr -> trained / untrained summary
    other: dict[str, Any]  # attacks of other families (embedding inversion), as written


class Metrics(TypedDict):
    schema_version: int
    audit_params: dict[str, Any]
    sanity_check: dict[str, Any] | None  # canary KS tests (randomised: a check for bugs, not evidence)
    shift_check: dict[str, Any]  # blind baselines' family: alpha, family_size, per_test_alpha, flagged pools
    runs: dict[str, RunMetrics]
    #: recipe -> its pooled pre-registered test over the recipe's run and replicas (stages/audit/pooled.py)
    pooled: dict[str, dict[str, Any]]
    planned: dict[str, dict[str, Any]]  # audit.ceiling.planned regime -> sigma, epsilons and ideal audit


ROC = pa.schema([
    pa.field("run", pa.string(), nullable=False),
    pa.field("attack", pa.string(), nullable=False),
    pa.field("group", pa.string(), nullable=False),
    pa.field("fpr", pa.float64(), nullable=False),
    pa.field("tpr", pa.float64(), nullable=False),
])


def write_metrics(path: Path, metrics: Metrics) -> None:
    write_json(path, metrics)


def read_metrics(path: Path) -> Metrics:
    metrics = read_json(path, PRODUCER)
    if metrics.get("schema_version") != METRICS_VERSION:
        raise DataError(f"{path}: metrics schema_version {metrics.get('schema_version')!r}, expected "
                        f"{METRICS_VERSION} (rerun the audit stage)")
    return metrics


def write_roc(path: Path, rows: list[dict]) -> None:
    write_table(pa.Table.from_pylist(rows, schema=ROC), path, ROC)


def read_roc(path: Path) -> dict[tuple[str, str, str], tuple[list[float], list[float]]]:
    """(run, attack, group) -> (fpr, tpr) points, in curve order."""
    out: dict[tuple[str, str, str], tuple[list[float], list[float]]] = {}
    for r in read_table(path, ROC, PRODUCER).to_pylist():
        f, t = out.setdefault((r["run"], r["attack"], r["group"]), ([], []))
        f.append(r["fpr"])
        t.append(r["tpr"])
    return out


def confidence_tag(confidence: float) -> str:
    """0.95 -> "95", 0.999 -> "999": the suffix of the metrics keys of a confidence (eps_lb_95, gdp_eps_lb_95), its
    percentage without the decimal point. Keys are built only here (``BoundKeys``), never parsed back."""
    if not 0.1 <= confidence < 1:
        raise ValueError(f"confidence {confidence!r}: a bound's confidence must be in [0.1, 1)")
    return f"{round(confidence * 100, 6):g}".replace(".", "")


class SeedStatus(str, Enum):
    """A bound's seed status (the seed ledger, stages/audit/ledger.py): a confirmation (its seed set's first recorded
    run, under this design, on seeds committed before it) or a development look."""

    CONFIRMATION = "confirmation"
    DEVELOPMENT = "development"


#: what a one-run test records per confidence: Steinke et al. 2023's assumption-free bound (eps_lb); under an assumed
#: Gaussian trade-off curve (gdp_mu_lb, gdp_eps_lb); under the accountant's own curve (curve_sigma_lb, curve_eps_lb);
#: what r guesses, all right, could show at most (max_provable_eps_lb)
BOUND_STATS = ("eps_lb", "gdp_mu_lb", "gdp_eps_lb", "curve_eps_lb", "curve_sigma_lb", "max_provable_eps_lb")
#: summaries of simulated (ideal) bounds; each also has its Monte Carlo error (``mcse_key``)
IDEAL_SUMMARIES = ("median", "p10", "p90")


def mcse_key(key: str) -> str:
    """The key of a simulated figure's Monte Carlo standard error: ideal_eps_lb_95_median -> ..._median_mcse."""
    return f"{key}_mcse"


def mc_interval_key(key: str) -> str:
    """The key of a simulated quantile's Monte Carlo interval [low, high] (order statistics, ~95 %): the way to state
    the error of a quantile of a bound that moves in steps (one count more or fewer), where a standard error misleads:
    ideal_eps_lb_95_median -> ..._median_mc95."""
    return f"{key}_mc95"


@dataclass(frozen=True)
class BoundKeys:
    """The metrics (and headline) keys of everything recorded at one confidence: the one place such a key is built.

    metrics.json keeps them flat (``eps_lb_95``, ``ideal_gdp_eps_lb_99_p10``...) so ``dvc metrics diff`` and every
    older experiment read them; code reaches them only through this record, never by formatting or splitting a
    key."""

    confidence: float

    @property
    def tag(self) -> str:
        return confidence_tag(self.confidence)

    def stat(self, name: str) -> str:
        """``name`` of BOUND_STATS at this confidence: stat("gdp_eps_lb") -> gdp_eps_lb_95."""
        if name not in BOUND_STATS:
            raise KeyError(f"{name!r} is not a bound statistic ({', '.join(BOUND_STATS)})")
        return f"{name}_{self.tag}"

    @property
    def eps_lb(self) -> str:
        return self.stat("eps_lb")

    @property
    def gdp_eps_lb(self) -> str:
        return self.stat("gdp_eps_lb")

    def ideal(self, name: str = "eps_lb", summary: str = "median") -> str:
        """A summary of the ideal audit's simulated bounds: ideal("gdp_eps_lb", "p10") -> ideal_gdp_eps_lb_95_p10."""
        if summary not in IDEAL_SUMMARIES:
            raise KeyError(f"{summary!r} is not an ideal summary ({', '.join(IDEAL_SUMMARIES)})")
        return f"ideal_{self.stat(name)}_{summary}"

    def headline(self, what: str) -> str:
        """A headline.json key: headline("audit") -> audit_eps_lb_95, headline("audit_gdp") -> audit_gdp_eps_lb_95."""
        return f"{what}_{self.eps_lb}"

    @property
    def label(self) -> str:
        """The column label of the assumption-free bound: ε̂95."""
        return "ε̂" + self.tag


def ideal_median_key(key: str) -> str:
    """The ideal audit's median of a recorded bound or count key: eps_lb_95 -> ideal_eps_lb_95_median (the variance
    study's measures name such keys in params)."""
    return f"ideal_{key}_median"


def confidence_key(confidence: float, prefix: str = "") -> str:
    """The key of the one-run bound at ``confidence``: eps_lb_95; with ``prefix`` e.g. gdp_eps_lb_95."""
    return BoundKeys(confidence).stat(f"{prefix}eps_lb")


_BOUND_KEY = re.compile(r"(?:^|\.)(?P<prefix>[a-z_]*?)eps_lb_(?P<tag>[1-9][0-9]*)$")


def confidence_of(key: str, prefix: str = "") -> float | None:
    """The confidence a bound key names (its last dotted part): "eps_lb_95" -> 0.95, "audit_primary.eps_lb_999" ->
    0.999; None when the key is no bound with that ``prefix``. The inverse of ``confidence_key``, for the one reader
    that has keys and no record: ``dvc exp show``'s scalars of an experiment (stages/studies/compare.py)."""
    m = _BOUND_KEY.search(key)
    if m is None or m["prefix"] != prefix:
        return None
    confidence = float(f"0.{m['tag']}")  # the tag is a percentage in [10, 100) without its point
    return confidence if confidence_tag(confidence) == m["tag"] else None


@dataclass(frozen=True)
class Bounds:
    """A one-run test's bounds at one confidence: the assumption-free one (Steinke et al. 2023) and, where computed,
    those under an assumed Gaussian trade-off curve. Read and written as the flat keys of ``BoundKeys``."""

    confidence: float
    eps_lb: float
    gdp_mu_lb: float | None = None
    gdp_eps_lb: float | None = None

    def to_metrics(self, gdp: bool = True) -> dict[str, float | None]:
        k = BoundKeys(self.confidence)
        out = {k.eps_lb: self.eps_lb}
        if gdp:
            out.update({k.stat("gdp_mu_lb"): self.gdp_mu_lb, k.gdp_eps_lb: self.gdp_eps_lb})
        return out

    @classmethod
    def from_metrics(cls, test: dict[str, Any], confidence: float) -> "Bounds":
        k = BoundKeys(confidence)
        return cls(confidence, test[k.eps_lb], test.get(k.stat("gdp_mu_lb")), test.get(k.gdp_eps_lb))


def clip_guesses(k_pos: int, k_neg: int, m: int) -> tuple[int, int]:
    """The (k_pos, k_neg) a one-run test actually makes on m canaries: "in" guesses first, "out" guesses from what
    is left. The only definition of the rule: the audit's tests record these counts, and readers match them."""
    k_pos = min(k_pos, m)
    return k_pos, min(k_neg, m - k_pos)


def fpr_keys(metrics: Metrics) -> list[str]:
    """The FPRs at which TPRs were computed (audit.fprs), smallest first."""
    keys = {k for r in metrics["runs"].values() for atk in r.get("attacks", {}).values() for m in atk.values()
            for k in m.get("tpr_at_fpr", {})}
    return sorted(keys, key=float)


def bound_keys(metrics: Metrics) -> list[BoundKeys]:
    """The keys of the bounds computed at each of audit.primary.confidences, in params order."""
    return [BoundKeys(c) for c in metrics["audit_params"]["primary"]["confidences"]]
