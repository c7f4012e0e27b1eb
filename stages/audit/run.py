"""The audit of every run: the canary sanity check, then each run's metrics and ROC curves."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

from ..attack.schema import read_attack_table, read_record, same_ranking
from ..canaries.schema import META, load_canary_users, read_audit_users, read_canaries, read_reference
from ..finetune.schema import read_run
from ..shared.bounds.ceiling import planned_ceiling
from ..shared.core.artifacts import Locations, locations
from ..shared.core.errors import ConfigError, DataError
from ..shared.core.params import read_params, section_of
from ..shared.core.replicas import replica_raw
from ..shared.core.seeds import DERIVATION
from .iid import sanity_check
from .ledger import design_key, read_ledger
from .pooled import pooled_test
from .schema import METRICS_VERSION, Metrics, metrics_of
from .shift import shift_check
from .summary import audit_delta, audit_run, groups_of
from .user_level import user_test_name

log = logging.getLogger("stages.audit")


def run_seeds(run_dir, canary_seed: int | None) -> list[int]:
    """The seeds a run drew from: its canaries' (``canaries.seed``) and its own (``finetune.seed``)."""
    own = read_run(run_dir).params["seed"]
    return sorted({int(s) for s in (canary_seed, own) if s is not None})


def pool_member(run: str, run_dir, scores_dir, seeds: list[int], params) -> dict:
    """One run of a pooled test: its primary attack's scores of the primary kind, labels, privacy and seeds."""
    p = params.primary
    info = read_run(run_dir)
    groups = {g: (s, y) for g, s, y, _ in groups_of(read_attack_table(scores_dir, p.attack, "membership"))}
    if p.kind not in groups:
        raise DataError(f"{scores_dir}: {p.attack}: no {p.kind!r} canaries scored (the pooled test needs them)")
    s, y = groups[p.kind]
    return {"run": run, "seeds": seeds, "privacy": info.privacy, "scores": s, "labels": y}


def replica_primary(repo, name: str, params) -> tuple[tuple, dict]:
    """((scores, labels, canary ids), privacy record) of replica ``name``'s primary attack and kind in the checkout
    at ``repo`` (its params.yaml names the replica): what a development look at the pooled rule reads."""
    path = Path(repo) / "params.yaml"
    where = locations(replica_raw(read_params(path), name, path), path)
    table = read_attack_table(Path(repo) / where.scores_dir(name), params.primary.attack, "membership")
    groups = {g: (s, y, i) for g, s, y, i in groups_of(table)}
    if params.primary.kind not in groups:
        raise DataError(f"{where.scores_dir(name)}: {params.primary.attack}: no {params.primary.kind!r} canaries")
    return groups[params.primary.kind], read_run(Path(repo) / where.run_dir(name)).privacy


def status_of(params, raw: dict, recipe: str, seeds, test: str | None = None) -> tuple[str, str]:
    """(ledger status, design key) of a bound on ``recipe`` at ``seeds`` under the design ``raw`` holds and this
    code's stream derivation (``ledger.py``); ``test``: the ledger's name of a test other than the recipe's primary
    one (``<run>:user``, the user-level test), under the recipe's design."""
    design = design_key(raw, recipe)
    status = read_ledger(params.seeds.ledger).status(test or recipe, seeds, design, DERIVATION, params.seeds)
    return status.value, design


def pooled_tests(params, where: Locations, pools: dict, canary_seed: int | None, raw: dict) -> dict:
    """recipe -> its pooled test over the recipe's run and its replicas (``pooled.py``); only for DP recipes."""
    out = {}
    for run, replicas in pools.items():
        own = where.run_dir(run)
        if not read_run(own).privacy.dp:
            raise ConfigError(f"audit.pooled.{run}: run {run} is not a DP run (the pooled test sits next to an "
                              "accountant's epsilon)")
        members = [pool_member(run, own, where.scores_dir(run), run_seeds(own, canary_seed), params)]
        for name, loc in replicas:
            members.append(pool_member(name, loc.run_dir(name), loc.scores_dir(name),
                                       [read_run(loc.run_dir(name)).params["seed"]], params))
        delta = audit_delta(params, members[0]["privacy"])
        rule = params.pooled[run]
        status, design = status_of(params, raw, run, [s for mem in members for s in mem["seeds"]])
        out[run] = {**pooled_test(members, (rule.k_pos, rule.k_neg), delta, params, status), "design": design}
    return out


def declared_rankings(where: Locations, runs: list[str]) -> dict[str, list[list[str]]]:
    """kind -> groups of attacks declared (at registration, written with the scores) to rank its canaries
    identically, over every run's attacks: what the exploratory family counted once."""
    out: dict[str, list[list[str]]] = {}
    for run in runs:
        for kind, groups in same_ranking(read_record(where.scores_dir(run)).attacks).items():
            known = out.setdefault(kind, [])
            for group in groups:
                mine = next((g for g in known if g[0] == group[0]), None)
                if mine is None:
                    known.append(list(group))
                else:
                    mine += [a for a in group if a not in mine]
    return out


def audit(params, runs: list[str], where: Locations, raw: dict, pools: dict | None = None,
          canary_seed: int | None = None) -> tuple[Metrics, list[dict]]:
    """(the metrics record, ROC points of every run's membership scores); ``pools``: recipe -> its replicas'
    (name, Locations) for the pooled tests of audit.pooled; ``canary_seed``: canaries.seed and ``raw``: the params
    (a bound's seed status: the seed ledger and the recipe's design)."""
    guard = None
    if params.sanity_check.enabled and (where.canaries / META).is_file():
        reference = read_reference(where.canary_reference)
        rows = {k: [{**r, "base_token_logprobs": reference[r["canary_id"]]} for r in v]
                for k, v in read_canaries(where.canaries)[1].items()}
        guard = sanity_check(rows, params.sanity_check.alpha, str(where.canaries))
    canary_users = load_canary_users(where.canaries)
    found = read_audit_users(where.canaries) if (where.canaries / META).is_file() else None
    audit_users = ({r["canary_id"]: r["user"] for r in found[1]}, found[0]["rows"]) if found else None
    results = {run: audit_run(where.run_dir(run), where.scores_dir(run), params, canary_users, audit_users)
               for run in runs}
    for run, (res, _) in results.items():
        if res.get("audit_primary"):
            seeds = run_seeds(where.run_dir(run), canary_seed)
            status, design = status_of(params, raw, run, seeds)
            res["audit_primary"].update(seeds=seeds, seed_status=status, design=design)
        if res.get("audit_user"):  # its own coins (canaries.audit_users.seed) and the run's draws (finetune.seed)
            seeds = sorted({int(section_of(raw, "canaries.audit_users.seed")),
                            int(read_run(where.run_dir(run)).params["seed"])})
            status, design = status_of(params, raw, run, seeds, test=user_test_name(run))
            res["audit_user"].update(seeds=seeds, seed_status=status, design=design)
    primary = params.primary
    registered = {**dataclasses.asdict(primary), "confidences": list(primary.confidences),
                  "runs": {r: dataclasses.asdict(g) for r, g in primary.runs.items()}}
    metrics = {
        "schema_version": METRICS_VERSION,
        "audit_params": {"primary": registered,
                         "primary_sha256": hashlib.sha256(json.dumps(registered, sort_keys=True).encode()).hexdigest(),
                         "exploratory": {"k_pos": list(params.exploratory.k_pos),
                                         "k_neg": list(params.exploratory.k_neg),
                                         "same_ranking": declared_rankings(where, runs)},
                         "ceiling": {"trials": params.ceiling.trials, "seed": params.ceiling.seed},
                         "delta": params.delta, "fallback_delta": params.fallback_delta,
                         "seeds": {"development": list(params.seeds.development),
                                   "preregistered": list(params.seeds.preregistered),
                                   "ledger": params.seeds.ledger, "streams": DERIVATION},
                         "pooled": {r: dataclasses.asdict(g) for r, g in params.pooled.items()},
                         "user": dataclasses.asdict(params.user),
                         "bootstrap": params.bootstrap, "min_per_side": params.min_per_side},
        "sanity_check": guard,
        "shift_check": shift_check({run: res for run, (res, _) in results.items()}, params),
        "runs": {run: res for run, (res, _) in results.items()},
        "pooled": pooled_tests(params, where, pools or {}, canary_seed, raw),
        "planned": {name: planned_ceiling(regime, primary, params.confidences, params.ceiling.trials,
                                          params.ceiling.seed) for name, regime in params.ceiling.planned.items()},
    }
    return metrics_of(metrics, "audit"), [row for _, roc in results.values() for row in roc]


def log_summary(metrics: Metrics) -> None:
    for run, res in metrics.runs.items():
        p = res.audit_primary
        if p:
            eps = " ".join(f"{k}={v:.3f}" for k, v in p.bounds.items() if "eps_lb" in k and isinstance(v, float)
                           and not k.startswith("ideal"))
            log.info("%s primary %s/%s (%d of %d right, %s seeds): %s", run, p.attack, p.kind, p.v, p.r,
                     p.seed_status.value, eps)
        for atk, kinds in res.attacks.items():
            for kind, m in kinds.items():
                tprs = " ".join(f"TPR@{f}={t.value:.3f}" for f, t in m.tpr_at_fpr.items())
                log.info("%s/%s/%s: AUROC=%s %s", run, atk, kind, "none" if m.auroc is None else f"{m.auroc:.3f}",
                         tprs)
    for recipe, p in metrics.pooled.items():
        log.info("%s pooled over %d runs (%s seeds): %d of %d right, eps-hat95 %.3f (GDP %.3f, own curve %s)",
                 recipe, len(p.runs), p.seed_status.value, p.v, p.r, p.bounds.get("eps_lb_95") or 0,
                 p.bounds.get("gdp_eps_lb_95") or 0, p.bounds.get("curve_eps_lb_95"))
