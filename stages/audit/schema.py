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

from enum import Enum
from pathlib import Path
from typing import Any, TypedDict

import pyarrow as pa

from ..shared.bounds.keys import BoundKeys
from ..shared.core.errors import DataError
from ..shared.core.io import read_json, read_table, write_json, write_table

# the record's version: bumped whenever its shape changes (what each version added: git log -p of this file)
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


class SeedStatus(str, Enum):
    """A bound's seed status (the seed ledger, stages/audit/ledger.py): a confirmation (its seed set's first recorded
    run, under this design, on seeds committed before it) or a development look."""

    CONFIRMATION = "confirmation"
    DEVELOPMENT = "development"


def fpr_keys(metrics: Metrics) -> list[str]:
    """The FPRs at which TPRs were computed (audit.fprs), smallest first."""
    keys = {k for r in metrics["runs"].values() for atk in r.get("attacks", {}).values() for m in atk.values()
            for k in m.get("tpr_at_fpr", {})}
    return sorted(keys, key=float)


def bound_keys(metrics: Metrics) -> list[BoundKeys]:
    """The keys of the bounds computed at each of audit.primary.confidences, in params order."""
    return [BoundKeys(c) for c in metrics["audit_params"]["primary"]["confidences"]]


#: the text membership attacks whose rows ``instrument_rows`` reads (each also scores users through their rows)
TEXT_ATTACKS = ("loss", "ref_ratio", "zlib", "min_k", "min_k_pp", "ez_mia")


def _auroc_row(instrument: str, pool: str, m: dict) -> dict:
    return {"instrument": instrument, "pool": pool, "auroc": m["auroc"], "auroc_ci95": m.get("auroc_ci95"),
            "auroc_p_exact": m.get("auroc_p_exact"), "members": m["members"], "non_members": m["non_members"]}


def _value_row(instrument: str, pool: str, value: float, ci95, members: int | None = None,
               non_members: int | None = None) -> dict:
    return {"instrument": instrument, "pool": pool, "value": value, "ci95": ci95, "members": members,
            "non_members": non_members}


def instrument_rows(metrics_run: RunMetrics) -> list[dict]:
    """Every instrument's measure in one run's entry (``runs.<run>``), one row per instrument (as the attack registry
    names it) and pool: an AUROC (``auroc``, ``auroc_ci95``, ``auroc_p_exact``, ``members``, ``non_members``) of the
    text attacks, user inference and the blind baseline, or a value (``value``, ``ci95``): VMR minus the base model
    per arm, embedding inversion's token F1. What the positive control and the report compare across runs."""
    r = metrics_run
    rows = []
    for name in (*TEXT_ATTACKS, "user_inference"):
        for pool, m in sorted((r["attacks"].get(name) or {}).items()):
            if pool in ("text", "users", "canary_users") and m.get("auroc") is not None:
                rows.append(_auroc_row(name, pool, m))
    for pool, m in sorted((r.get("blind") or {}).items()):
        rows.append(_auroc_row("blind", pool, m))
    vmr = (r.get("memorization") or {}).get("vmr")
    if vmr:
        for arm, pool in (("trained", "trained"), ("untrained", "held_out")):
            a = vmr[arm]
            rows.append(_value_row("vmr", pool, a["minus_base"], a["minus_base_ci95"], a["secrets"]))
    eia = (r.get("other") or {}).get("eia")
    if eia:  # its baseline: the same decoder on another text's embedding (none before the baseline existed)
        rows.append({**_value_row("eia", "test", eia["f1"], None), "baseline": eia.get("baseline_f1")})
    return rows


def sees(row: dict) -> bool:
    """An AUROC above chance: its 95% interval above 0.5, or, without one, its exact permutation p below 0.05."""
    if row.get("auroc_ci95"):
        return row["auroc_ci95"][0] > 0.5
    return row.get("auroc_p_exact") is not None and row["auroc_p_exact"] < 0.05


def covers_chance(row: dict) -> bool:
    """Chance within the row's evidence: its AUROC interval covers 0.5 (or, without one, its exact one-sided p is at
    least 0.05); a value row's interval covers 0."""
    if "auroc" in row:
        if row.get("auroc_ci95"):
            return row["auroc_ci95"][0] <= 0.5 <= row["auroc_ci95"][1]
        return row.get("auroc_p_exact") is None or row["auroc_p_exact"] >= 0.05
    return row["ci95"] is None or row["ci95"][0] <= 0.0 <= row["ci95"][1]


def measure(row: dict) -> float:
    return row["auroc"] if "auroc" in row else row["value"]
