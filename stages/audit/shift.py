"""The distribution-shift check: is a non-randomised pool's blind baseline significantly above chance?

Each pool (a run's trained vs held-out text rows, its held-in vs held-out users) scored by the model-free
blind attack (stages/attack/blind.py) gets a one-sided bootstrap p-value of "blind AUROC <= 0.5"; the pools
form one family, Bonferroni-corrected at ``audit.shift_check.alpha``. A flagged pool's membership-inference
numbers measure the shift between its two sides, not leakage, and the report says so instead of presenting
them as leakage.
"""
from __future__ import annotations

import numpy as np

from .roc import auroc, bootstrap_stats


def blind_pool(scores, members, notes: dict, params) -> dict:
    """One pool's blind baseline: AUROC with its 95% percentile interval and the one-sided p-value of
    "AUROC <= 0.5" (share of resampled AUROCs at or below chance, +1 corrected), from one set of stratified
    bootstrap resamples; and what differs."""
    y = np.asarray(members, dtype=bool)
    vals = bootstrap_stats(scores, y, auroc, params.bootstrap, params.seed)
    lo, hi = np.nanpercentile(vals, [2.5, 97.5])
    return {"items": notes["items"], "folds": notes["folds"], "members": int(y.sum()), "non_members": int((~y).sum()),
            "auroc": auroc(scores, y), "auroc_ci95": (float(lo), float(hi)),
            "p_value": float((1 + np.sum(vals <= 0.5)) / (1 + len(vals))), "differences": notes["differences"]}


def shift_check(runs: dict[str, dict], alpha: float) -> dict:
    """Flag every pool whose p-value is at most alpha / (number of pools) (in place: ``flagged`` per pool)."""
    pools = [(run, g) for run, r in runs.items() for g in (r.get("blind") or {})]
    per_test = alpha / len(pools) if pools else alpha
    for run, g in pools:
        pool = runs[run]["blind"][g]
        pool["flagged"] = pool["p_value"] <= per_test
    return {"alpha": alpha, "family_size": len(pools), "per_test_alpha": per_test, "correction": "bonferroni",
            "flagged": [f"{run}/{g}" for run, g in pools if runs[run]["blind"][g]["flagged"]]}
