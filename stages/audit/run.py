"""The audit of every run: the IID guard on the canaries, then each run's metrics and ROC curves."""
from __future__ import annotations

import logging

from ..canaries.schema import META, read_canaries
from ..core.artifacts import Locations
from .iid import iid_guard
from .schema import METRICS_VERSION, Metrics
from .summary import audit_run

log = logging.getLogger("stages.audit")


def audit(params, runs: list[str], where: Locations) -> tuple[Metrics, list[dict]]:
    """(metrics.json content, ROC points of every run's membership scores)."""
    guard = None
    if params.iid_guard.enabled and (where.canaries / META).is_file():
        guard = iid_guard(read_canaries(where.canaries)[1], params.iid_guard.alpha, str(where.canaries))
    results = {run: audit_run(where.scores_dir(run), params) for run in runs}
    metrics: Metrics = {
        "schema_version": METRICS_VERSION,
        "audit_params": {"k_pos": params.k_pos, "k_neg": params.k_neg, "delta": params.delta,
                         "fallback_delta": params.fallback_delta,
                         "sweep": {"k_pos": list(params.sweep.k_pos), "k_neg": list(params.sweep.k_neg)},
                         "confidences": list(params.confidences), "bootstrap": params.bootstrap},
        "iid_guard": guard,
        "runs": {run: res for run, (res, _) in results.items()},
    }
    return metrics, [row for _, roc in results.values() for row in roc]


def log_summary(metrics: Metrics) -> None:
    for run, res in metrics["runs"].items():
        for atk, kinds in res["attacks"].items():
            for kind, m in kinds.items():
                eps = " ".join(f"{k}={v:.3f}" for k, v in m.get("audit", {}).items() if k.startswith("eps_lb"))
                tprs = " ".join(f"TPR@{f}={t['value']:.3f}" for f, t in m["tpr_at_fpr"].items())
                log.info("%s/%s/%s: %s AUROC=%.3f %s", run, atk, kind, eps, m["auroc"], tprs)
