"""ROC metrics for membership scores: TPR at fixed FPR, AUROC, and bootstrap intervals.

TPR at FPR x is the largest TPR over score thresholds whose empirical FPR is <= x (no
interpolation), so with 500 non-members "FPR 0.1%" admits zero false positives. AUROC is the
Mann-Whitney statistic with ties counted 1/2. Bootstrap: members and non-members are resampled with
replacement separately (sizes fixed), percentile intervals.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy.stats import rankdata


def roc_curve(scores, members) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) at every distinct threshold, from (0,0) to (1,1)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(members, dtype=bool)
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    distinct = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]
    tp = np.cumsum(y)[distinct]
    fp = np.cumsum(~y)[distinct]
    P, N = max(int(y.sum()), 1), max(int((~y).sum()), 1)
    return np.r_[0.0, fp / N], np.r_[0.0, tp / P]


def tpr_at_fpr(scores, members, fpr: float) -> float:
    f, t = roc_curve(scores, members)
    ok = f <= fpr + 1e-12
    return float(t[ok].max()) if ok.any() else 0.0


def auroc(scores, members) -> float:
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(members, dtype=bool)
    P, N = int(y.sum()), int((~y).sum())
    if P == 0 or N == 0:
        return float("nan")
    ranks = rankdata(s)
    return float((ranks[y].sum() - P * (P + 1) / 2) / (P * N))


def bootstrap_stats(scores, members, stat: Callable[[np.ndarray, np.ndarray], float], n: int,
                    seed: int) -> np.ndarray:
    """``stat`` over ``n`` stratified bootstrap resamples (members and non-members resampled separately)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(members, dtype=bool)
    pos, neg = s[y], s[~y]
    rng = np.random.default_rng(seed)
    lab = np.r_[np.ones(len(pos), bool), np.zeros(len(neg), bool)]
    vals = np.empty(n)
    for b in range(n):
        sample = np.r_[pos[rng.integers(0, len(pos), len(pos))], neg[rng.integers(0, len(neg), len(neg))]]
        vals[b] = stat(sample, lab)
    return vals


def bootstrap_ci(scores, members, stat: Callable[[np.ndarray, np.ndarray], float], n: int, seed: int,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of ``stat`` over ``n`` stratified bootstrap resamples."""
    if n <= 0:
        return (float("nan"), float("nan"))
    vals = bootstrap_stats(scores, members, stat, n, seed)
    lo, hi = np.nanpercentile(vals, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def roc_metrics(scores, members, fprs: Sequence[float], n_boot: int, seed: int) -> dict:
    out = {"members": int(np.sum(members)), "non_members": int(len(members) - np.sum(members)),
           "auroc": auroc(scores, members), "auroc_ci95": bootstrap_ci(scores, members, auroc, n_boot, seed),
           "tpr_at_fpr": {}}
    for f in fprs:
        key = f"{f:g}"
        out["tpr_at_fpr"][key] = {
            "value": tpr_at_fpr(scores, members, f),
            "ci95": bootstrap_ci(scores, members, lambda s, y, f=f: tpr_at_fpr(s, y, f), n_boot, seed),
        }
    return out


def bootstrap_mean_ci(values, n: int, seed: int, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean over ``n`` resamples of ``values``."""
    v = np.asarray(values, dtype=np.float64)
    if n <= 0 or len(v) == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), (n, len(v)))].mean(axis=1)
    lo, hi = np.percentile(means, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)
