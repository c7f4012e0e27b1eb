"""DVC stage ``audit``: one-run epsilon lower bounds (95%/99%), TPR at fixed FPR and AUROC with bootstrap
intervals for every run, attack and canary kind, and each recipe's pooled test over its replicas ->
reports/metrics.json (DVC metrics) and the ROC curves
(reports/roc.parquet)."""
from __future__ import annotations

from typing import Sequence

from stages.audit.params import AuditParams
from stages.audit.run import audit, log_summary
from stages.audit.schema import write_metrics, write_roc
from stages.shared.core.artifacts import locations
from stages.shared.core.cli import run_cli, stage_args
from stages.shared.core.errors import DataError
from stages.shared.core.params import load, run_names, section_of
from stages.shared.core.replicas import load_replicas, replica_raw, replicas_of


def pool_sources(raw: dict, params: AuditParams, path: str) -> dict[str, list[tuple[str, object]]]:
    """recipe -> [(replica name, its Locations)] for each pooled recipe (audit.pooled); the recipe's own run is read
    from the main locations."""
    replicas = load_replicas(raw, path)
    return {run: [(name, locations(replica_raw(raw, name, path), path)) for name in replicas_of(replicas, run)]
            for run in params.pooled}


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__)
    params = load(AuditParams, "audit", args.params, raw)
    runs = run_names(raw, args.params)
    if not runs:
        raise DataError(f"{args.params}: runs: no runs to audit")
    metrics, roc = audit(params, runs, locations(raw, args.params), raw,
                         pools=pool_sources(raw, params, args.params), canary_seed=section_of(raw, "canaries.seed"))
    write_roc(params.roc_out, roc)
    write_metrics(params.out, metrics)
    log_summary(metrics)


if __name__ == "__main__":
    run_cli(main)
