"""The public contract of the audit stage, read by the report (and by ``dvc metrics``). Long because: the metrics
record's types, one per nested part of metrics.json, are the contract itself.

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
from typing import Any

import pyarrow as pa

from ..finetune.schema import PrivacyRecord
from ..shared.bounds.keys import BoundKeys
from ..shared.core.errors import DataError
from ..shared.core.io import read_json, read_table, write_json, write_table
from ..shared.core.records import flattened, optional, read_record, record, record_json
from ..shared.studies.rows import TEXT_ATTACKS, AurocRow, EiaRow, InstrumentRow, ValueRow

# the record's version: bumped whenever its shape changes (what each version added: git log -p of this file)
METRICS_VERSION = 9
PRODUCER = "audit"

#: item groups whose membership is not randomised (text rows, users): ROC metrics only, no one-run bound;
#: every other group is a canary kind; ``audit_users`` rows share one coin per user (canaries.audit_users), so they are
#: tested over users (``audit_user``), never as examples
NON_CANARY_GROUPS = ("text", "users", "canary_users", "audit_users")


class SeedStatus(str, Enum):
    """A bound's seed status (the seed ledger, stages/audit/ledger.py): a confirmation (its seed set's first recorded
    run, under this design, on seeds committed before it) or a development look."""

    CONFIRMATION = "confirmation"
    DEVELOPMENT = "development"


class Verdict(str, Enum):
    """The shift check's verdict on a run's pool (stages/audit/shift.py)."""

    SHIFT = "shift"
    TOO_WEAK = "too_weak"
    NO_SHIFT = "no_shift"

    @property
    def words(self) -> str:
        """How the report words it."""
        return {"shift": "INVALID MIA: distribution shift", "too_weak": "guard too weak at this size",
                "no_shift": "no shift detected"}[self.value]


#: the keys of a test's bounds per confidence, kept flat beside its own (``eps_lb_95``, ``gdp_mu_lb_99``,
#: ``ideal_eps_lb_95_p10_mc95``, ``max_provable_eps_lb_95``, ``curve_sigma_lb_99``...: stages/shared/bounds/keys.py)
BOUND_KEYS = r"[a-z_]*?(eps|mu|sigma)_lb_[1-9][0-9]*(_[a-z0-9]+)*"
Bound = float | list[float] | None


@record
class Interval:
    value: float | None
    ci95: list[float] | None


@record
class GroupMetrics:
    """ROC metrics of one item group (a pool) under one attack."""

    members: int
    non_members: int
    auroc: float | None  # None: every scored item on one side
    auroc_ci95: list[float] | None  # None: fewer than audit.min_per_side on a side (no interval formed)
    auroc_p_exact: float | None = optional()  # only then: exact one-sided permutation p of AUROC > 0.5
    tpr_at_fpr: dict[str, Interval]  # key: f"{fpr:g}", e.g. "0.01"
    #: non-randomised pools: AUROC minus the blind baseline's on the same items, paired 95% interval
    minus_blind: Interval | None = optional()


@record
class Primary:
    """The pre-registered test (audit.primary) of a run with canaries; ``bounds`` per audit.primary.confidences,
    e.g. for 0.95: eps_lb_95 (Steinke et al., assumption-free), gdp_eps_lb_95 and gdp_mu_lb_95 (Gaussian trade-off
    assumed); a DP run also its ideal audit's quantiles, each with its Monte Carlo error (_mcse) and interval (_mc95),
    and the run's own trade-off curve's bounds (curve_*)."""

    attack: str
    kind: str
    m: int
    k_pos: int
    k_neg: int
    r: int
    v: int
    delta: float
    precision: float | None
    bounds: dict[str, Bound] = flattened(BOUND_KEYS)
    accountant_epsilon: float | None = optional()  # DP runs
    last_iterate_epsilon: float | None = optional()
    ideal_trials: int | None = optional()
    ideal_correct_median: float | None = optional()
    ideal_percentile: float | None = optional()
    ideal_percentile_mcse: float | None = optional()
    curve_assumption: str | None = optional()
    seeds: list[int]  # the run's seeds (canaries.seed, finetune.seed): the seed ledger's key
    seed_status: SeedStatus
    design: str | None  # the design commit the seed set first ran under


@record
class ExploratoryTest:
    attack: str
    same_ranking: list[str]
    kind: str
    k_pos: int
    k_neg: int
    m: int
    r: int
    v: int
    bounds: dict[str, Bound] = flattened(BOUND_KEYS)


@record
class BestTest:
    value: float
    attack: str
    kind: str
    k_pos: int
    k_neg: int
    r: int
    v: int


@record
class IdenticalRanking:
    kind: str
    attacks: list[str]


@record
class Exploratory:
    """Every attack x canary kind x guesses test; eps_lb_<c> of each holds at c family-wise (Bonferroni)."""

    family_size: int
    correction: str
    per_test_confidence: dict[str, float]  # eps_lb_<c> -> 1 - (1 - c) / family_size
    identical_rankings: list[IdenticalRanking]  # one test for all of them
    tests: list[ExploratoryTest]
    best: dict[str, BestTest]  # eps_lb_<c> -> the largest corrected bound and its test


@record
class AuditUser:
    """The user-level one-run test over the audit users (audit/user_level.py) and, for a DP run, its ideal."""

    unit: str
    attack: str
    score: str
    m: int
    k: int
    k_pos: int
    k_neg: int
    r: int
    v: int
    delta: float
    members: int
    non_members: int
    canary_user_auroc: float | None
    canary_user_auroc_ci95: list[float] | None
    bounds: dict[str, Bound] = flattened(BOUND_KEYS)
    mechanism_unit: str | None = optional()  # DP runs: what the guarantee protects
    accountant_epsilon: float | None = optional()
    ideal_trials: int | None = optional()
    ideal_assumption: str | None = optional()
    ideal_percentile: float | None = optional()
    ideal_percentile_mcse: float | None = optional()
    seeds: list[int]
    seed_status: SeedStatus
    design: str | None


@record
class Exposure:
    """One format's (or "all") exposure summary (audit/exposure.py)."""

    candidates: int
    inserted: int
    exposure_rate: float | None
    mean_exposure_inserted: float | None
    mean_exposure_not_inserted: float | None
    max_exposure: float
    mean_exposure_by_repetitions: dict[str, float]


@record
class Difference:
    feature: str
    members: float
    non_members: float
    d: float | None


@record
class Blind:
    """One pool's model-free baseline (audit/shift.py ``blind_pool``) and the shift check's verdict on it."""

    items: int
    folds: int
    pool: str  # the pool's fingerprint (its items and labels)
    members: int
    non_members: int
    auroc: float
    auroc_ci95: list[float] | None
    test: str
    p_value: float
    differences: list[Difference]
    flagged: bool
    verdict: Verdict
    detectable_auroc: float | None


@record
class Arm:
    """One arm of a memorisation measure (trained / untrained secrets): means, fine-tuned minus base."""

    secrets: int
    score: float | None
    base_score: float | None
    minus_base: float | None
    max_minus_base: float | None
    minus_base_ci95: list[float] | None


@record
class SecretControl:
    candidates: int
    rows_dropped: int
    trained_still_present: int
    seed: int
    coin_trained: int
    coin_held_out: int


@record
class Memorization:
    """VMR / AIR / ACR of one run (audit/summary.py ``memorization_summary``)."""

    randomised: bool
    control: SecretControl | None = optional()  # randomised: the coin's record
    trained: Arm
    untrained: Arm


@record
class ResponseBin:
    canaries: int
    mean_z: float | None
    ci95: list[float] | None
    ideal_z: float | None


@record
class AttackResponse:
    bins: dict[str, ResponseBin]
    z_per_inclusion: float | None
    member_shift: float | None
    ideal_z_per_inclusion: float | None


@record
class CanaryResponse:
    """Per attack, the canaries' z-score per inclusion bin (audit/response.py)."""

    kind: str
    bins: list[str]
    ideal_model: str | None
    attacks: dict[str, AttackResponse]


@record
class Training:
    """What the run's training was (public quantities only)."""

    steps: int | None
    sample_rate: float | None
    expected_exposures_per_member: float | None
    n_population: int
    public_divisor: float | None


@record
class TrainableSummary:
    paradigm: str
    secret_rows: bool
    lora_r: int | None
    lora_targets: list[str] | str | None  # a list of module names, or "auto"
    virtual_tokens: int | None
    new_token_rows: int
    secret_token_rows: int
    parameters: int


@record
class Utility:
    valid_nll: float | None
    valid_perplexity: float | None


@record
class RunMetrics:
    """One run's entry (``runs.<run>``)."""

    privacy: PrivacyRecord  # the run's privacy record (stages.finetune)
    training: Training
    trainable: TrainableSummary
    dataset: str
    utility: Utility
    attacks: dict[str, dict[str, GroupMetrics]]  # membership attack -> item group -> metrics
    attacks_skipped: dict[str, str]  # attack of the default list the run cannot have -> why (stages.attack.run)
    other: dict[str, Any]  # attacks of other families (embedding inversion), as written
    #: runs with user inference: the per-example score it averaged per user (attack.user_score)
    user_score: str | None = optional()
    canary_users_by_length: dict[str, dict[str, GroupMetrics]] | None = optional()  # attack -> length -> metrics
    #: attack -> "<length>:<documents>" -> metrics: a length's held-in canary users trained on that many documents
    #: ("all": every one) against all its held-out ones; only where canaries.users.documents varies them
    canary_users_by_documents: dict[str, dict[str, GroupMetrics]] | None = optional()
    memorization: dict[str, Memorization] | None = optional()  # vmr/air/acr
    exposure: dict[str, Exposure] | None = optional()  # format (and "all") -> exposure summary
    blind: dict[str, Blind] | None = optional()  # pool (text, users) -> the blind baseline
    audit_primary: Primary | None  # None: the run has no canaries
    #: runs trained on the audit users (finetune.user_canaries): the user-level one-run test (audit/user_level.py)
    audit_user: AuditUser | None = optional()
    audit_exploratory: Exploratory | None
    canary_response: CanaryResponse | None = optional()


@record
class Power:
    """The shift check's power at a pool's size: the smallest AUROC it flags at the power asked (None: none)."""

    auroc: float | None
    power: float
    trials: int
    level: float
    flagged_share: float | None = optional()
    share_at_auroc_1: float | None = optional()


@record
class LargestAuroc:
    auroc: float
    attack: str


@record
class ShiftPool:
    pool: str
    group: str
    runs: list[str]
    members: int
    non_members: int
    auroc: float
    auroc_ci95: list[float] | None
    p_value: float
    test: str
    flagged: bool
    power: Power
    largest_model_auroc: dict[str, LargestAuroc | None]
    verdicts: dict[str, Verdict]


@record
class ShiftCheck:
    """The blind baselines' family: each distinct pool tested once at alpha / family size."""

    alpha: float
    family_size: int
    per_test_alpha: float
    correction: str
    power_model: str
    flagged: list[str]
    pools: list[ShiftPool]


@record
class SanityCheck:
    """The canary KS tests (randomised: a check for bugs, not evidence)."""

    alpha: float
    tests: int
    kinds: dict[str, dict[str, float]]
    corrected_alpha: float
    passed: bool


@record
class SingleRun:
    run: str
    seeds: list[int]
    seed_status: SeedStatus
    m: int
    r: int
    v: int
    bounds: dict[str, Bound] = flattened(BOUND_KEYS)
    ideal_percentile: float | None
    ideal_percentile_mcse: float | None


@record
class Efficiency:
    what: str
    median: float | None
    low: float | None
    high: float | None
    coverage: float | None
    n: int


@record
class Pooled:
    """A recipe's pooled pre-registered test over its run and replicas (audit/pooled.py)."""

    recipe: str
    runs: list[str]
    seeds: list[int]
    seed_status: SeedStatus
    k_pos_per_run: int
    k_neg_per_run: int
    m: int
    r: int
    v: int
    delta: float
    accountant_epsilon: float
    sample_rate: float
    steps: int
    noise_multiplier: float
    optimizer: str | None
    secure_rng: bool
    bounds: dict[str, Bound] = flattened(BOUND_KEYS)
    curve_assumption: str
    streams: str
    ideal_trials: int
    ideal_correct_median: float
    ideal_percentile: float | None
    ideal_percentile_mcse: float | None
    single_runs: list[SingleRun]
    efficiency: Efficiency
    design: str | None


@record
class Planned:
    """A planned regime's ceiling (audit.ceiling.planned): its sigma, epsilons and ideal audit."""

    sample_rate: float
    steps: int
    noise_multiplier: float
    delta: float
    accountant: str
    accountant_epsilon: float
    m: int
    last_iterate_epsilon: float
    bounds: dict[str, Bound] = flattened(BOUND_KEYS)
    ideal_trials: int


@record
class AuditParamsRecord:
    """The audit's params as they ran: audit.primary as registered (and its sha-256), the exploratory family, the
    ceiling, deltas, the seed lists, the pooled and user-level rules, the bootstrap and the smallest side."""

    primary: dict[str, Any]
    primary_sha256: str
    exploratory: dict[str, Any]
    ceiling: dict[str, Any]
    delta: float | None
    fallback_delta: float
    seeds: dict[str, Any]
    pooled: dict[str, Any]
    user: dict[str, Any]
    bootstrap: int
    min_per_side: int

    @property
    def confidences(self) -> list[float]:
        return list(self.primary["confidences"])


@record
class Metrics:
    schema_version: int
    audit_params: AuditParamsRecord
    sanity_check: SanityCheck | None
    shift_check: ShiftCheck
    runs: dict[str, RunMetrics]
    #: recipe -> its pooled pre-registered test over the recipe's run and replicas (stages/audit/pooled.py)
    pooled: dict[str, Pooled]
    planned: dict[str, Planned]  # audit.ceiling.planned regime -> sigma, epsilons and ideal audit


ROC = pa.schema([
    pa.field("run", pa.string(), nullable=False),
    pa.field("attack", pa.string(), nullable=False),
    pa.field("group", pa.string(), nullable=False),
    pa.field("fpr", pa.float64(), nullable=False),
    pa.field("tpr", pa.float64(), nullable=False),
])


def write_metrics(path: Path, metrics: Metrics) -> None:
    write_json(path, record_json(metrics))


def metrics_of(data: Any, where: str) -> Metrics:
    """The ``Metrics`` record of parsed metrics.json ``data`` (``where`` names it in errors); a record of another
    version is refused in one line naming it and the command that regenerates it."""
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != METRICS_VERSION:
        raise DataError(f"{where}: metrics schema_version {version!r}, expected {METRICS_VERSION} "
                        "(regenerate it: dvc repro audit)")
    return read_record(Metrics, data, where)


def read_metrics(path: Path) -> Metrics:
    return metrics_of(read_json(path, PRODUCER), str(path))


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


def fpr_keys(metrics: Metrics) -> list[str]:
    """The FPRs at which TPRs were computed (audit.fprs), smallest first."""
    keys = {k for r in metrics.runs.values() for atk in r.attacks.values() for m in atk.values()
            for k in m.tpr_at_fpr}
    return sorted(keys, key=float)


def bound_keys(metrics: Metrics) -> list[BoundKeys]:
    """The keys of the bounds computed at each of audit.primary.confidences, in params order."""
    return [BoundKeys(c) for c in metrics.audit_params.confidences]


def _auroc_row(instrument: str, pool: str, m: GroupMetrics | Blind) -> AurocRow:
    return AurocRow(instrument=instrument, pool=pool, auroc=m.auroc, auroc_ci95=m.auroc_ci95,
                    auroc_p_exact=getattr(m, "auroc_p_exact", None), members=m.members, non_members=m.non_members)


def instrument_rows(metrics_run: RunMetrics) -> list[InstrumentRow]:
    """Every instrument's measure in one run's entry (``runs.<run>``), one row per instrument (as the attack registry
    names it) and pool: an AUROC (``AurocRow``) of the text attacks, user inference and the blind baseline, or a value
    (``ValueRow``, ``EiaRow``): VMR and AIR minus the base model per arm, embedding inversion's token F1. What the
    positive control and the report compare across runs."""
    r = metrics_run
    rows: list[InstrumentRow] = []
    for name in (*TEXT_ATTACKS, "user_inference"):
        for pool, m in sorted((r.attacks.get(name) or {}).items()):
            if pool in ("text", "users", "canary_users") and m.auroc is not None:
                rows.append(_auroc_row(name, pool, m))
    for pool, b in sorted((r.blind or {}).items()):
        rows.append(_auroc_row("blind", pool, b))
    for name in ("vmr", "air"):
        m = (r.memorization or {}).get(name)
        if m:
            for arm, pool in ((m.trained, "trained"), (m.untrained, "held_out")):
                rows.append(ValueRow(instrument=name, pool=pool, value=arm.minus_base, ci95=arm.minus_base_ci95,
                                     members=arm.secrets, non_members=None))
    eia = r.other.get("eia")  # another family's summary, as its attack wrote it (stages/attack/eia.py)
    if eia:  # its baseline: the same decoder on another text's embedding (none before the baseline existed)
        rows.append(EiaRow(instrument="eia", pool="test", value=eia["f1"], ci95=None, members=None, non_members=None,
                           baseline=eia.get("baseline_f1")))
    return rows
