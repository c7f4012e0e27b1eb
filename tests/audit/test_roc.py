"""The bootstrap's array form against its per-resample definition: the same resamples (seed, draws, order) and the
same AUROC and TPR-at-FPR of each, equal to the bit (the intervals in metrics.json do not move with the speed-up)."""
import numpy as np
import pytest

from stages.audit.roc import (
    _bootstrap_rows,
    _tprs,
    auroc,
    bootstrap_aurocs,
    bootstrap_stats,
    paired_auroc_difference,
    roc_curve,
    roc_metrics,
)

FPRS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)


def per_resample(scores, members, n, seed):
    stat = lambda s, y: [auroc(s, y), *_tprs(*roc_curve(s, y), FPRS)]  # noqa: E731
    return np.array([list(v) for v in _bootstrap_rows(scores, members, stat, n, seed)])


def pools():
    rng = np.random.default_rng(7)
    for members, non_members, ties in ((100, 100, None), (12, 300, None), (250, 40, 1), (60, 60, 0), (500, 500, 2)):
        y = np.r_[np.ones(members, bool), np.zeros(non_members, bool)]
        rng.shuffle(y)
        s = rng.normal(size=len(y)) + 0.7 * y
        if ties is not None:  # coarse scores: ties within and across the two sides
            s = np.round(s, ties)
        yield s, y


@pytest.mark.parametrize("case", range(5))
def test_roc_metrics_intervals_equal_the_per_resample_computation(case):
    s, y = list(pools())[case]
    want = per_resample(s, y, 300, 11)
    got = roc_metrics(s, y, FPRS, 300, 11, 10)
    lo, hi = np.nanpercentile(want, [2.5, 97.5], axis=0)
    assert got["auroc_ci95"] == (float(lo[0]), float(hi[0]))
    for c, f in enumerate(FPRS, start=1):
        assert got["tpr_at_fpr"][f"{f:g}"]["ci95"] == (float(lo[c]), float(hi[c]))


@pytest.mark.parametrize("case", range(5))
def test_bootstrap_aurocs_are_the_per_resample_aurocs_paired_by_row(case):
    s, y = list(pools())[case]
    assert np.array_equal(bootstrap_aurocs(s, y, 200, 3), bootstrap_stats(s, y, auroc, 200, 3))
    b = np.round(s * 0.3 + np.random.default_rng(case).normal(size=len(s)), 1)
    both = np.column_stack([s, b])
    diff = lambda t, lab: auroc(t[:, 0], lab) - auroc(t[:, 1], lab)  # noqa: E731
    want = np.nanpercentile(bootstrap_stats(both, y, diff, 200, 3), [2.5, 97.5])
    assert paired_auroc_difference(s, b, y, 200, 3, 10)["ci95"] == tuple(float(v) for v in want)


def test_a_nan_score_keeps_the_per_resample_path():
    s, y = next(pools())
    s = s.copy()
    s[3] = np.nan
    assert np.array_equal(bootstrap_aurocs(s, y, 20, 1), bootstrap_stats(s, y, auroc, 20, 1), equal_nan=True)
