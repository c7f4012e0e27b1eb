"""The distribution-shift check: is a non-randomised pool's blind baseline significantly above chance?

Each pool (a run's trained vs held-out text rows, its held-in vs held-out users) scored by the model-free
blind attack (stages/attack/blind.py) gets a one-sided bootstrap p-value of "blind AUROC <= 0.5"; the pools
form one family, Bonferroni-corrected at ``audit.shift_check.alpha``. A flagged pool's membership-inference
numbers measure the shift between its two sides, not leakage, and the report says so instead of presenting
them as leakage.
"""
from __future__ import annotations

from .roc import auroc_p_value, roc_metrics


def blind_pool(scores, members, notes: dict, params) -> dict:
    """One pool's blind baseline: AUROC with its 95% interval, the one-sided p-value and what differs."""
    m = roc_metrics(scores, members, params.fprs, params.bootstrap, params.seed)
    return {"items": notes["items"], "folds": notes["folds"], "members": m["members"], "non_members": m["non_members"], "auroc": m["auroc"],
            "auroc_ci95": m["auroc_ci95"], "p_value": auroc_p_value(scores, members, params.bootstrap, params.seed),
            "differences": notes["differences"]}


def shift_check(runs: dict[str, dict], alpha: float) -> dict:
    """Flag every pool whose p-value is at most alpha / (number of pools) (in place: ``flagged`` per pool)."""
    pools = [(run, g) for run, r in runs.items() for g in (r.get("blind") or {})]
    per_test = alpha / len(pools) if pools else alpha
    for run, g in pools:
        pool = runs[run]["blind"][g]
        pool["flagged"] = pool["p_value"] <= per_test
    return {"alpha": alpha, "family_size": len(pools), "per_test_alpha": per_test, "correction": "bonferroni",
            "flagged": [f"{run}/{g}" for run, g in pools if runs[run]["blind"][g]["flagged"]]}
