"""ROC metrics for membership scores: TPR at fixed FPR, AUROC, and bootstrap intervals.

TPR at FPR x is the largest TPR over score thresholds whose empirical FPR is <= x (no
interpolation), so with 500 non-members "FPR 0.1%" admits zero false positives. AUROC is the
Mann-Whitney statistic with ties counted 1/2. Bootstrap: members and non-members are resampled with
replacement separately (sizes fixed), percentile intervals. Below ``min_per_side`` members or non-members no
interval is formed (a percentile bootstrap of 3 against 1 prints [1.000, 1.000]): the exact one-sided
Mann-Whitney p-value of "AUROC > 0.5" is given instead (every relabelling of the items equally likely).
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


def _draws(P: int, N: int, n: int, seed: int):
    """The ``n`` stratified resamples of P members and N non-members, in order: per resample the members' indices
    (P with replacement), then the non-members' (N). Every bootstrap here reads its resamples from this one draw."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield rng.integers(0, P, P), rng.integers(0, N, N)


def _bootstrap_rows(scores, members, stat: Callable, n: int, seed: int):
    """``stat(sample, labels)`` of each of ``n`` stratified bootstrap resamples, in order (see ``bootstrap_stats``)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(members, dtype=bool)
    pos, neg = s[y], s[~y]
    lab = np.r_[np.ones(len(pos), bool), np.zeros(len(neg), bool)]
    for i, j in _draws(len(pos), len(neg), n, seed):
        yield stat(np.r_[pos[i], neg[j]], lab)


def bootstrap_stats(scores, members, stat: Callable[[np.ndarray, np.ndarray], float], n: int,
                    seed: int) -> np.ndarray:
    """``stat`` over ``n`` stratified bootstrap resamples (members and non-members resampled separately; rows of
    a 2-d ``scores`` are resampled together, so several scores of one item stay paired)."""
    return np.fromiter(_bootstrap_rows(scores, members, stat, n, seed), dtype=np.float64, count=n)


class _Resamples:
    """The ``n`` stratified resamples of ``_draws`` (those ``_bootstrap_rows`` reads), held as how often each member
    and each non-member occurs in each: the statistics below are then array operations over all resamples at once,
    equal to the per-resample ones to the bit (their numerators are exact counts)."""

    def __init__(self, members, n: int, seed: int):
        y = np.asarray(members, dtype=bool)
        self.P, self.N, self.n = int(y.sum()), int((~y).sum()), int(n)
        pos = np.empty((self.n, self.P), dtype=np.int64)
        neg = np.empty((self.n, self.N), dtype=np.int64)
        for b, (i, j) in enumerate(_draws(self.P, self.N, self.n, seed)):
            pos[b], neg[b] = i, j
        self.pos_counts = self._counts(pos, self.P)
        self.neg_counts = self._counts(neg, self.N)

    def _counts(self, idx: np.ndarray, k: int) -> np.ndarray:
        flat = (idx + np.arange(self.n)[:, None] * k).ravel()
        return np.bincount(flat, minlength=self.n * k).reshape(self.n, k)

    @staticmethod
    def usable(scores, members) -> bool:
        """Both sides present and no NaN score (the per-resample path keeps scipy's NaN handling)."""
        y = np.asarray(members, dtype=bool)
        return bool(y.any() and (~y).any() and not np.isnan(np.asarray(scores, dtype=np.float64)).any())

    def split(self, s: np.ndarray, y: np.ndarray):
        """Members' scores, non-members' scores sorted ascending, and the non-members' counts in that order."""
        neg = s[~y]
        order = np.argsort(neg, kind="stable")
        return s[y], neg[order], self.neg_counts[:, order]

    def auroc(self, scores, members) -> np.ndarray:
        """The Mann-Whitney AUROC (ties 1/2) of every resample: 2U counted in integers, then U / (P N) as ``auroc``
        divides the (exact) rank sum."""
        s = np.asarray(scores, dtype=np.float64)
        y = np.asarray(members, dtype=bool)
        pos, ns, counts = self.split(s, y)
        below = np.concatenate([np.zeros((self.n, 1), dtype=np.int64), np.cumsum(counts, axis=1)], axis=1)
        lt = np.searchsorted(ns, pos, side="left")
        le = np.searchsorted(ns, pos, side="right")
        less, upto = below[:, lt], below[:, le]
        twice_u = (self.pos_counts * (less + upto)).sum(axis=1)  # 2 (#below + #tied / 2) per member draw
        return (twice_u / 2) / (self.P * self.N)

    def tprs(self, scores, members, fprs: Sequence[float]) -> np.ndarray:
        """(n, len(fprs)): ``tpr_at_fpr`` of every resample. With K the most false positives FPR x admits, the best
        threshold keeps every member scoring above the (K+1)-th highest non-member."""
        s = np.asarray(scores, dtype=np.float64)
        y = np.asarray(members, dtype=bool)
        pos, ns, counts = self.split(s, y)
        at_or_above = np.flip(np.cumsum(np.flip(counts, axis=1), axis=1), axis=1)  # resampled non-members >= ns[j]
        lt = np.searchsorted(ns, pos, side="left")  # member i beats ns[j] iff j < lt[i]
        fpr_of = np.arange(self.N + 1) / max(self.N, 1)
        out = np.empty((self.n, len(fprs)), dtype=np.float64)
        for c, f in enumerate(fprs):
            k = int(np.flatnonzero(fpr_of <= f + 1e-12).max())
            if k >= self.N:
                out[:, c] = self.P / max(self.P, 1)
                continue
            j = (at_or_above >= k + 1).sum(axis=1) - 1  # the (K+1)-th highest non-member is ns[j]
            tp = (self.pos_counts * (lt[None, :] > j[:, None])).sum(axis=1)
            out[:, c] = tp / max(self.P, 1)
        return out


def bootstrap_aurocs(scores, members, n: int, seed: int) -> np.ndarray:
    """AUROC over ``n`` stratified resamples, as ``bootstrap_stats(scores, members, auroc, n, seed)``; a 2-d
    ``scores`` gives one column per score column, each resample's rows shared (paired)."""
    s = np.asarray(scores, dtype=np.float64)
    cols = s if s.ndim == 2 else s[:, None]
    if not _Resamples.usable(s, members):
        if s.ndim == 1:
            return bootstrap_stats(s, members, auroc, n, seed)
        return np.column_stack([bootstrap_stats(c, members, auroc, n, seed) for c in cols.T])
    rs = _Resamples(members, n, seed)
    out = np.column_stack([rs.auroc(c, members) for c in cols.T])
    return out if s.ndim == 2 else out[:, 0]


def bootstrap_ci(scores, members, stat: Callable[[np.ndarray, np.ndarray], float], n: int, seed: int,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of ``stat`` over ``n`` stratified bootstrap resamples."""
    if n <= 0:
        return (float("nan"), float("nan"))
    vals = bootstrap_stats(scores, members, stat, n, seed)
    lo, hi = np.nanpercentile(vals, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def too_small(members, min_per_side: int) -> bool:
    """Fewer than ``min_per_side`` members or non-members: no bootstrap interval is formed."""
    y = np.asarray(members, dtype=bool)
    return min(int(y.sum()), int((~y).sum())) < min_per_side


def auroc_p_value(scores, members, exact: bool) -> float:
    """One-sided p-value of "members score no higher than non-members" (AUROC <= 0.5) by the Mann-Whitney U test
    (scipy): its exact permutation distribution (``exact``; exact where scores do not tie) or the tie-corrected
    normal approximation."""
    from scipy.stats import mannwhitneyu

    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(members, dtype=bool)
    return float(mannwhitneyu(s[y], s[~y], alternative="greater", method="exact" if exact else "asymptotic").pvalue)


def _tprs(fpr: np.ndarray, tpr: np.ndarray, fprs: Sequence[float]) -> list[float]:
    """TPR at each FPR of ``fprs`` off one ROC curve (as ``tpr_at_fpr``)."""
    out = []
    for f in fprs:
        ok = fpr <= f + 1e-12
        out.append(float(tpr[ok].max()) if ok.any() else 0.0)
    return out


def roc_metrics(scores, members, fprs: Sequence[float], n_boot: int, seed: int, min_per_side: int) -> dict:
    """AUROC and TPR at each FPR with 95% stratified bootstrap intervals; below ``min_per_side`` on a side, no
    intervals (None) and the exact p-value of AUROC > 0.5 instead (``auroc_p_exact``).

    Every statistic reads the same ``n_boot`` resamples (one ROC curve and one ranking per resample), as separate
    ``bootstrap_ci`` calls with the same seed would draw them."""
    small = too_small(members, min_per_side)
    out = {"members": int(np.sum(members)), "non_members": int(len(members) - np.sum(members)),
           "auroc": auroc(scores, members), "auroc_ci95": None, "tpr_at_fpr": {}}
    if small:
        out["auroc_p_exact"] = auroc_p_value(scores, members, exact=True)
    f, t = roc_curve(scores, members)
    cis: list = [None] * (len(fprs) + 1)
    if not small and n_boot > 0:
        if _Resamples.usable(scores, members):
            rs = _Resamples(members, n_boot, seed)
            vals = np.column_stack([rs.auroc(scores, members), rs.tprs(scores, members, fprs)])
        else:
            stat = lambda s, y: [auroc(s, y), *_tprs(*roc_curve(s, y), fprs)]  # noqa: E731
            vals = np.array([list(v) for v in _bootstrap_rows(scores, members, stat, n_boot, seed)])
        lo, hi = np.nanpercentile(vals, [2.5, 97.5], axis=0)
        cis = [(float(a), float(b)) for a, b in zip(lo, hi)]
    elif not small:
        cis = [(float("nan"), float("nan"))] * (len(fprs) + 1)
    out["auroc_ci95"] = cis[0]
    for fpr, value, ci in zip(fprs, _tprs(f, t, fprs), cis[1:]):
        out["tpr_at_fpr"][f"{fpr:g}"] = {"value": value, "ci95": ci}
    return out


def paired_auroc_difference(a, b, members, n_boot: int, seed: int, min_per_side: int) -> dict:
    """AUROC(a) - AUROC(b) of two scores of the same items, with a 95% paired bootstrap interval: each
    stratified resample of the items (members and non-members separately) scores both, so their correlation
    stays in the interval. None for the interval below ``min_per_side`` on a side."""
    both = np.column_stack([np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)])
    y = np.asarray(members, dtype=bool)
    diff = lambda s, lab: auroc(s[:, 0], lab) - auroc(s[:, 1], lab)  # noqa: E731
    out = {"value": diff(both, y), "ci95": None}
    if too_small(y, min_per_side) or n_boot <= 0:
        return out
    cols = bootstrap_aurocs(both, y, n_boot, seed)
    lo, hi = np.nanpercentile(cols[:, 0] - cols[:, 1], [2.5, 97.5])
    out["ci95"] = (float(lo), float(hi))
    return out


def bootstrap_mean_ci(values, n: int, seed: int, level: float = 0.95, min_count: int = 1) -> tuple[float, float] | None:
    """Percentile interval of the mean over ``n`` resamples of ``values``; None for fewer than ``min_count``
    values (no interval is formed on so few)."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < max(min_count, 1):
        return None
    if n <= 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), (n, len(v)))].mean(axis=1)
    lo, hi = np.percentile(means, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)
