"""The seed ledger: every recorded run of a seed set, and the status of a bound that follows from it.

A seed set confirms at most one design. A run's bound is a *confirmation* only when

* none of its seeds is a development seed (``audit.seeds.development``: a seed any design choice saw), and
* the first recorded run of this recipe at any of its seeds (the ledger, ``audit.seeds.ledger``) is this seed set
  (or a set holding it: the recipe's own run of a pooled set) under this design (``design_key``: the recipe's pooled
  design, seeds left out) with these random streams (``stages.shared.core.seeds.DERIVATION``), and those seeds were
  committed before that first run; or, for seeds the ledger
  has never seen, every seed stands in ``audit.seeds.preregistered`` (committed before any run at it: the run being
  audited is then the first, and recording it makes that mechanical).

Anything else is a *development* look: a set run once under another design (or other streams) stays development for
every later design. The ledger is append-only and written by code only (``flows/pooled_audit.py`` records each
reproduced pipeline's pooled and single-run primary tests; its ``--init-ledger`` built the first entries from the
git history of reports/metrics.json and the recorded pooled rows).
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..shared.core.errors import DataError
from ..shared.core.params import build, section_of
from .params import PrimaryParams
from .schema import SeedStatus

LEDGER_VERSION = 1
#: the rule keys of audit.primary that params files of older commits predate, as absent (no such rule)
RULE_KEYS_ABSENT = {"no_dp": None, "runs": {}}
#: ``finetune.dp`` keys added after designs were fixed that change nothing while the DP unit is the example (what
#: every run did before they existed): at ``unit: example`` a params file with them describes the same design
USER_LEVEL_KEYS = ("unit", "rows_per_user")
#: keys added after designs were fixed for the user-level audit's canary users: ``finetune.user_canaries`` (false: the
#: run trains on none, as every run did before it) and ``canaries.audit_users`` (read only by runs with them)
AUDIT_USER_KEYS = ("user_canaries",)
#: ``canaries.users`` keys added after designs were fixed, with the value that reads as their absence: ``documents``
#: [null] trains every held-in canary user on all of its documents, as every run did before the key existed
CANARY_USER_KEYS = {"documents": [None]}


def _without(d: dict | None, *keys: str) -> dict:
    return {k: v for k, v in (d or {}).items() if k not in keys}


def _neutral(finetune: dict) -> dict:
    """The ``finetune`` section without the user-level DP keys while its unit is the example (``USER_LEVEL_KEYS``)."""
    out = copy.deepcopy(finetune)
    for key in AUDIT_USER_KEYS:
        if not out.get(key):
            out.pop(key, None)
    dp = out.get("dp")
    if isinstance(dp, dict) and dp.get("unit", "example") == "example":
        for key in USER_LEVEL_KEYS:
            dp.pop(key, None)
    return out


def _canary_users(users: dict | None) -> dict | None:
    """``canaries.users`` without its keys that hold the value reading as their absence (``CANARY_USER_KEYS``)."""
    if not isinstance(users, dict):
        return users
    return {k: v for k, v in users.items() if k not in CANARY_USER_KEYS or list(v or []) != CANARY_USER_KEYS[k]}


def rule_of(raw: dict, recipe: str) -> list[int]:
    """[k_pos, k_neg] of the recipe's primary test as the audit reads it (``PrimaryParams.rule``: its own rule, else
    for a recipe without DP ``no_dp``, else the default); DP as the run's params set it (``runs.<recipe>.dp.enabled``,
    else ``finetune.dp.enabled``). Only ``audit.primary`` is built: a params file of any commit whose other sections
    today's schema no longer reads still gives its rule, and one older than a rule key reads as not having that rule."""
    primary = build(PrimaryParams, {**RULE_KEYS_ABSENT, **(section_of(raw, "audit.primary") or {})}, "audit.primary")
    default = (section_of(raw, "finetune.dp") or {}).get("enabled")
    dp = (section_of(raw, f"runs.{recipe}.dp") or {}).get("enabled", default)
    return list(primary.rule(recipe, bool(dp)))


def design_of(raw: dict, recipe: str) -> dict:
    """The recipe's design, seeds left out (a seed is not a design choice): the pooled rule, the primary test (with
    the recipe's own rule), the replicas' attacks and how many replicas of it, the canaries and fine-tune config and
    the run's own entry."""
    primary = section_of(raw, "audit.primary") or {}
    replicas = section_of(raw, "replicas") or {}
    canaries = section_of(raw, "canaries") or {}
    finetune = _neutral(_without(section_of(raw, "finetune"), "seed", "secrets"))
    run = _run_entry(raw, recipe)
    audit_users = bool(run.get("user_canaries", finetune.get("user_canaries")))
    return {"pooled": (section_of(raw, "audit.pooled") or {}).get(recipe),
            "primary": {**_without(primary, "runs", "no_dp"), "run": rule_of(raw, recipe)},
            "replicas": {**_without(replicas, "sets"),
                         "count": sum(1 for r in (replicas.get("sets") or {}).values() if r.get("run") == recipe)},
            "canaries": {**_without(canaries, "seed", "audit_users"),
                         "formatted": _without(canaries.get("formatted"), "seed"),
                         **({"users": _canary_users(canaries["users"])} if "users" in canaries else {}),
                         **({"audit_users": _without(canaries.get("audit_users"), "seed")} if audit_users else {})},
            "finetune": finetune,
            "run": run}


def _run_entry(raw: dict, recipe: str) -> dict:
    """``runs.<recipe>`` without its seed and its ``secrets`` (its dataset's, checked by the params: a name dvc.yaml
    reads, not a design choice), and without a ``dataset`` equal to ``finetune.dataset`` (the run trains on that
    dataset whether or not it names it: dvc.yaml needs every run to name its own)."""
    run = _without(section_of(raw, f"runs.{recipe}"), "seed", "secrets")
    if "dataset" in run and run["dataset"] == (section_of(raw, "finetune") or {}).get("dataset"):
        run.pop("dataset")
    return run


def design_key(raw: dict, recipe: str) -> str:
    """The recipe's design as a hash of ``design_of`` (sha256 of its sorted JSON): equal keys, equal designs."""
    return hashlib.sha256(json.dumps(design_of(raw, recipe), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded run of a seed set: the recipe (its runs, the recipe's own first), the seeds, the design
    (``design_key``, and the commit since which params.yaml held it, where known), the stream derivation, where it
    was reproduced (``params_commit``; a DVC experiment's baseline, ``experiment`` naming it), whether its seeds were
    committed before it (``registered_before``), its primary result (m, r, v, eps_lb_95; None where the run was not
    recorded) and where that result is kept (``source``)."""

    recipe: str
    runs: tuple[str, ...]
    seeds: tuple[int, ...]
    design: str
    streams: str
    params_commit: str
    registered_before: bool
    result: dict | None
    source: str
    design_commit: str | None = None
    experiment: str | None = None
    note: str | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["runs"], d["seeds"] = list(self.runs), list(self.seeds)
        return d

    @classmethod
    def from_json(cls, d: dict, where: str = "seed ledger") -> LedgerEntry:
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - known)
        if unknown:
            raise DataError(f"{where}: unknown entry keys {unknown}")
        try:
            return cls(**{**d, "runs": tuple(d["runs"]), "seeds": tuple(int(s) for s in d["seeds"])})
        except (KeyError, TypeError) as e:
            raise DataError(f"{where}: a ledger entry is malformed ({e})") from None


@dataclass(frozen=True)
class Ledger:
    entries: tuple[LedgerEntry, ...] = field(default_factory=tuple)

    def runs_of(self, recipe: str, seeds) -> list[LedgerEntry]:
        """The recorded runs of ``recipe`` at any of ``seeds``, in the order they were recorded."""
        want = set(int(s) for s in seeds)
        return [e for e in self.entries if e.recipe == recipe and want & set(e.seeds)]

    def status(self, recipe: str, seeds, design: str, streams: str, registry) -> SeedStatus:
        """The status of a bound on ``recipe`` at ``seeds`` under ``design`` / ``streams`` (module docstring);
        ``registry``: ``audit.seeds`` (its development and preregistered lists)."""
        seeds = sorted(set(int(s) for s in seeds))
        if set(seeds) & set(registry.development):
            return SeedStatus.DEVELOPMENT
        seen = self.runs_of(recipe, seeds)
        if not seen:
            return SeedStatus.CONFIRMATION if set(seeds) <= set(registry.preregistered) else SeedStatus.DEVELOPMENT
        first = seen[0]  # a run of the set (one of its replicas alone, say) shares the set's first run
        clean = (set(seeds) <= set(first.seeds) and first.design == design and first.streams == streams
                 and first.registered_before)
        return SeedStatus.CONFIRMATION if clean else SeedStatus.DEVELOPMENT

    def first_run(self, recipe: str, seeds) -> LedgerEntry | None:
        seen = self.runs_of(recipe, seeds)
        return seen[0] if seen else None

    def to_json(self) -> dict:
        return {"version": LEDGER_VERSION, "entries": [e.to_json() for e in self.entries]}

    def appended(self, *entries: LedgerEntry) -> Ledger:
        return Ledger(self.entries + tuple(entries))


def read_ledger(path) -> Ledger:
    """The ledger at ``path``; an empty one where no file exists yet (no run recorded)."""
    path = Path(path)
    if not path.is_file():
        return Ledger()
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not JSON ({e.msg})") from None
    if d.get("version") != LEDGER_VERSION:
        raise DataError(f"{path}: ledger version {d.get('version')!r}, this code reads {LEDGER_VERSION} "
                        "(python -m flows.pooled_audit --init-ledger builds it anew)")
    return Ledger(tuple(LedgerEntry.from_json(e, str(path)) for e in d.get("entries", [])))


def write_ledger(path, ledger: Ledger) -> None:
    """Write ``ledger`` atomically (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(ledger.to_json(), indent=1) + "\n")
    tmp.replace(path)

