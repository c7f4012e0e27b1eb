"""Per-run, per-attack, per-canary-kind audit summary (what reports/metrics.json holds)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .one_run import one_run_audit
from .roc import roc_metrics


def audit_delta(params, privacy: dict) -> float:
    """The delta of the null hypothesis: audit.delta, else the run's own (DP) delta, else the fallback."""
    if params.delta is not None:
        return params.delta
    return float(privacy["delta"]) if privacy.get("dp") else params.fallback_delta


def audit_table(table, params, delta: float) -> dict:
    """Audit one scores table (columns kind, member, score) kind by kind."""
    out = {}
    kinds = table.column("kind").to_pylist()
    scores = table.column("score").to_numpy()
    members = np.asarray(table.column("member").to_pylist(), dtype=bool)
    for kind in sorted(set(kinds)):
        sel = np.asarray([k == kind for k in kinds])
        s, y = scores[sel], members[sel]
        out[kind] = {
            "audit": one_run_audit(s, y, params.k_pos, params.k_neg, delta, params.confidences),
            **roc_metrics(s, y, params.fprs, params.bootstrap, params.seed),
        }
    return out


def audit_run(scores_dir: Path, params) -> dict:
    from ..data.schemas import SCORES
    from ..io import read_json, read_table

    info = read_json(scores_dir / "run.json")
    result = {
        "privacy": info["privacy"],
        "training": {k: info[k] for k in ("steps", "sample_rate", "expected_batch_size",
                                          "expected_exposures_per_member", "n_examples", "train_seconds")},
        "utility": {"valid_nll": info["valid"]["nll"], "valid_perplexity": info["valid"]["perplexity"]},
        "attacks": {},
    }
    for attack in info["attacks"]:
        table = read_table(scores_dir / f"{attack}.parquet", SCORES)
        result["attacks"][attack] = audit_table(table, params, audit_delta(params, info["privacy"]))
    return result
