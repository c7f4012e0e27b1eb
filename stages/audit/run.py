"""The audit of every run: the canary sanity check, then each run's metrics and ROC curves."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging

from ..canaries.schema import META, load_canary_users, read_canaries, read_reference
from ..core.artifacts import Locations
from .ceiling import planned_ceiling
from .iid import sanity_check
from .schema import METRICS_VERSION, Metrics
from .shift import shift_check
from .summary import audit_run

log = logging.getLogger("stages.audit")


def audit(params, runs: list[str], where: Locations) -> tuple[Metrics, list[dict]]:
    """(metrics.json content, ROC points of every run's membership scores)."""
    guard = None
    if params.sanity_check.enabled and (where.canaries / META).is_file():
        reference = read_reference(where.canary_reference)
        rows = {k: [{**r, "base_token_logprobs": reference[r["canary_id"]]} for r in v]
                for k, v in read_canaries(where.canaries)[1].items()}
        guard = sanity_check(rows, params.sanity_check.alpha, str(where.canaries))
    lengths = {u: r["length"] for u, r in load_canary_users(where.canaries).items()}
    results = {run: audit_run(where.run_dir(run), where.scores_dir(run), params, lengths) for run in runs}
    primary = params.primary
    registered = {**dataclasses.asdict(primary), "confidences": list(primary.confidences),
                  "runs": {r: dataclasses.asdict(g) for r, g in primary.runs.items()}}
    metrics: Metrics = {
        "schema_version": METRICS_VERSION,
        "audit_params": {"primary": registered,
                         "primary_sha256": hashlib.sha256(json.dumps(registered, sort_keys=True).encode()).hexdigest(),
                         "exploratory": {"k_pos": list(params.exploratory.k_pos),
                                         "k_neg": list(params.exploratory.k_neg),
                                         "same_ranking": {k: [list(g) for g in v]
                                                          for k, v in params.exploratory.same_ranking.items()}},
                         "ceiling": {"trials": params.ceiling.trials, "seed": params.ceiling.seed},
                         "delta": params.delta, "fallback_delta": params.fallback_delta,
                         "bootstrap": params.bootstrap, "min_per_side": params.min_per_side},
        "sanity_check": guard,
        "shift_check": shift_check({run: res for run, (res, _) in results.items()}, params),
        "runs": {run: res for run, (res, _) in results.items()},
        "planned": {name: planned_ceiling(regime, primary, params.confidences, params.ceiling.trials,
                                          params.ceiling.seed) for name, regime in params.ceiling.planned.items()},
    }
    return metrics, [row for _, roc in results.values() for row in roc]


def log_summary(metrics: Metrics) -> None:
    for run, res in metrics["runs"].items():
        p = res.get("audit_primary")
        if p:
            eps = " ".join(f"{k}={v:.3f}" for k, v in p.items() if "eps_lb" in k and v is not None
                           and not k.startswith("ideal"))
            log.info("%s primary %s/%s (%d of %d right): %s", run, p["attack"], p["kind"], p["v"], p["r"], eps)
        for atk, kinds in res["attacks"].items():
            for kind, m in kinds.items():
                tprs = " ".join(f"TPR@{f}={t['value']:.3f}" for f, t in m["tpr_at_fpr"].items())
                log.info("%s/%s/%s: AUROC=%.3f %s", run, atk, kind, m["auroc"], tprs)
