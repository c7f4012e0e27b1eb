"""Per-run, per-attack, per-canary-kind audit summary (what reports/metrics.json holds)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .one_run import one_run_audit, swept_audit
from .roc import roc_metrics


def audit_delta(params, privacy: dict) -> float:
    """The delta of the null hypothesis: audit.delta, else the run's own (DP) delta, else the fallback."""
    if params.delta is not None:
        return params.delta
    return float(privacy["delta"]) if privacy.get("dp") else params.fallback_delta


NON_CANARY_GROUPS = ("text", "users", "canary_users")


def audit_table(table, params, delta: float) -> dict:
    """ROC metrics per group; for canary groups (randomized membership) also the one-run bound."""
    out = {}
    groups = table.column("group").to_pylist()
    scores = table.column("score").to_numpy()
    members = np.asarray(table.column("member").to_pylist(), dtype=bool)
    for group in sorted(set(groups)):
        sel = np.asarray([g == group for g in groups])
        s, y = scores[sel], members[sel]
        res = roc_metrics(s, y, params.fprs, params.bootstrap, params.seed)
        if group not in NON_CANARY_GROUPS:
            res["audit"] = one_run_audit(s, y, params.k_pos, params.k_neg, delta, params.confidences)
            if params.sweep.k_pos:
                grid = [(kp, kn) for kp in params.sweep.k_pos for kn in (params.sweep.k_neg or (0,))]
                res["audit_sweep"] = swept_audit(s, y, grid, delta, params.confidences)
        out[group] = res
    return out


def audit_run(scores_dir: Path, params) -> dict:
    from ..data.schemas import MEMORIZATION, SCORES
    from ..io import read_json, read_table

    info = read_json(scores_dir / "run.json")
    delta = audit_delta(params, info["privacy"])
    result = {
        "privacy": info["privacy"],
        "training": {k: info[k] for k in ("steps", "sample_rate", "expected_batch_size",
                                          "expected_exposures_per_member", "n_examples", "train_seconds")},
        "dataset": info["params"]["dataset"],
        "utility": {"valid_nll": info["valid"]["nll"], "valid_perplexity": info["valid"]["perplexity"]},
        "attacks": {},
        "other": {},
    }
    for attack, family in info["attacks"].items():
        if family == "membership":
            result["attacks"][attack] = audit_table(read_table(scores_dir / f"{attack}.parquet", SCORES), params, delta)
        elif family == "exposure":
            from ..attacks.exposure import summarize
            from ..data.schemas import EXPOSURE

            result["exposure"] = summarize(read_table(scores_dir / f"{attack}.parquet", EXPOSURE))
        elif family == "memorization":
            result["memorization"] = result.get("memorization", {})
            result["memorization"][attack] = memorization_summary(
                read_table(scores_dir / f"{attack}.parquet", MEMORIZATION), params)
        else:
            result["other"][attack] = read_json(scores_dir / f"{attack}.json")
    return result


def memorization_summary(table, params) -> dict:
    """Mean score of the fine-tuned and the base model and their difference (base leakage removed),
    for secrets the run trained on and for the untrained control; 95% bootstrap over secrets."""
    from .roc import bootstrap_mean_ci

    t = table.to_pandas()
    out = {}
    for name, g in (("trained", t[t["trained"]]), ("untrained", t[~t["trained"]])):
        diff = (g["score"] - g["base_score"]).to_numpy()
        out[name] = {"secrets": int(len(g)), "score": float(g["score"].mean()) if len(g) else None,
                     "base_score": float(g["base_score"].mean()) if len(g) else None,
                     "minus_base": float(diff.mean()) if len(g) else None,
                     "minus_base_ci95": bootstrap_mean_ci(diff, params.bootstrap, params.seed) if len(g) else None}
    return out
