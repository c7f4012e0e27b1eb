"""DVC stage ``audit``: one-run epsilon lower bounds (95%/99%), TPR at fixed FPR and AUROC with bootstrap
intervals for every run, attack and canary kind -> reports/metrics.json (DVC metrics)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from .config import AttackParams, AuditParams, CanaryParams, load, run_names, stage_args
from .errors import DataError, run_cli

log = logging.getLogger("stages.audit")


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__)
    params = load(AuditParams, "audit", args.params, raw)
    attack = load(AttackParams, "attack", args.params, raw)
    runs = run_names(raw)
    if not runs:
        raise DataError(f"{args.params}: runs: no runs to audit")
    from .auditing.summary import audit_run
    from .io import write_json

    guard = None
    if params.iid_guard.enabled:
        from .auditing.iid import iid_guard
        from .finetune import load_canary_rows

        canary_dir = Path(load(CanaryParams, "canaries", args.params, raw).out_dir)
        if (canary_dir / "meta.json").is_file():
            guard = iid_guard(load_canary_rows(canary_dir)[1], params.iid_guard.alpha, str(canary_dir))
    metrics = {
        "audit_params": {"k_pos": params.k_pos, "k_neg": params.k_neg, "delta": params.delta, "fallback_delta": params.fallback_delta,
                         "sweep": {"k_pos": list(params.sweep.k_pos), "k_neg": list(params.sweep.k_neg)},
                         "confidences": list(params.confidences), "bootstrap": params.bootstrap},
        "iid_guard": guard,
        "runs": {run: audit_run(Path(attack.out_dir) / run, params) for run in runs},
    }
    write_json(params.out, metrics)
    for run, res in metrics["runs"].items():
        for atk, kinds in res["attacks"].items():
            for kind, m in kinds.items():
                eps = " ".join(f"{k}={v:.3f}" for k, v in m.get("audit", {}).items() if k.startswith("eps_lb"))
                tprs = " ".join(f"TPR@{f}={t['value']:.3f}" for f, t in m["tpr_at_fpr"].items())
                log.info("%s/%s/%s: %s AUROC=%.3f %s", run, atk, kind, eps, m["auroc"], tprs)


if __name__ == "__main__":
    run_cli(main)
