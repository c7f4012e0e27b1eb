"""One-run epsilon lower bound and ROC statistics."""
import math

import numpy as np
import pytest

from stages.audit.roc import auroc, bootstrap_ci, roc_curve, tpr_at_fpr
from stages.shared.bounds.one_run import epsilon_lower_bound, guesses, p_value


def _pmf(k: int, r: int, p: float) -> float:
    return math.comb(r, k) * p**k * (1 - p) ** (r - k)


def reference_p_value(m, r, v, eps, delta):
    """Steinke et al. Thm 5.2 written term by term (running sum over i), independent of scipy."""
    p = 1 / (1 + math.exp(-eps))
    beta = sum(_pmf(k, r, p) for k in range(v, r + 1))
    alpha, running = 0.0, 0.0
    for i in range(1, v + 1):
        running += _pmf(v - i, r, p)
        alpha = max(alpha, running / i)
    return min(beta + alpha * delta * 2 * m, 1.0)


def reference_eps(m, r, v, delta, conf):
    lo, hi = 0.0, 50.0
    if reference_p_value(m, r, v, 0.0, delta) >= 1 - conf:
        return 0.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if reference_p_value(m, r, v, mid, delta) < 1 - conf else (lo, mid)
    return lo


def test_seed_sanity_point():
    # privacy-auditing-of-llms section 5.1: 1000 canaries, 100 guesses all right, delta 1e-5, 99% -> 2.99
    assert epsilon_lower_bound(1000, 100, 100, 1e-5, 0.99) == pytest.approx(2.99, abs=0.01)


@pytest.mark.parametrize("m,r,v,delta,conf", [
    (1000, 100, 100, 1e-5, 0.95), (1000, 100, 90, 1e-5, 0.95), (1000, 100, 75, 1e-5, 0.99),
    (1000, 500, 400, 1e-5, 0.95), (1000, 1000, 1000, 1e-5, 0.95), (200, 50, 45, 0.0, 0.95),
    (200, 20, 20, 0.0, 0.99), (5000, 300, 250, 1e-6, 0.95), (100, 10, 10, 1e-3, 0.9), (1000, 100, 60, 1e-5, 0.95),
])
def test_matches_reference(m, r, v, delta, conf):
    assert epsilon_lower_bound(m, r, v, delta, conf) == pytest.approx(reference_eps(m, r, v, delta, conf), abs=1e-3)


def test_p_value_matches_reference_and_is_monotone_in_eps():
    prev = 0.0
    for eps in np.linspace(0, 4, 17):
        pv = p_value(1000, 100, 80, float(eps), 1e-5)
        assert pv == pytest.approx(reference_p_value(1000, 100, 80, float(eps), 1e-5), rel=1e-9, abs=1e-12)
        assert pv >= prev - 1e-15
        prev = pv


def test_no_evidence_gives_zero_and_bad_counts_raise():
    assert epsilon_lower_bound(1000, 100, 50, 1e-5, 0.95) == 0.0  # chance-level guesses
    assert epsilon_lower_bound(1000, 100, 0, 1e-5, 0.95) == 0.0
    with pytest.raises(ValueError):
        epsilon_lower_bound(10, 20, 5, 1e-5, 0.95)  # more guesses than canaries
    with pytest.raises(ValueError):
        epsilon_lower_bound(10, 5, 6, 1e-5, 0.95)


def test_more_confidence_and_delta_lower_the_bound():
    assert epsilon_lower_bound(1000, 100, 95, 1e-5, 0.99) < epsilon_lower_bound(1000, 100, 95, 1e-5, 0.95)
    assert epsilon_lower_bound(1000, 100, 95, 1e-3, 0.95) < epsilon_lower_bound(1000, 100, 95, 0.0, 0.95)


def test_guesses_count_correct_guesses():
    scores = np.arange(10, dtype=float)  # canary 9 scores highest
    members = np.array([0, 0, 1, 0, 0, 1, 0, 1, 1, 1], dtype=bool)
    # "in" = 9, 8, 7 (all members: 3 right); "out" = 0, 1 (both non-members: 2 right)
    assert guesses(scores, members, 3, 2) == (10, 5, 5)
    assert guesses(scores, members, 3, 0) == (10, 3, 3)
    assert guesses(scores, members, 20, 5) == (10, 10, 5)  # clipped to the m canaries
    # ties broken by canary order, never by membership
    assert guesses(np.zeros(4), np.array([0, 1, 0, 1], dtype=bool), 2, 0) == (4, 2, 1)
    with pytest.raises(ValueError, match="NaN"):
        guesses(np.array([0.0, np.nan]), np.array([0, 1], dtype=bool), 1, 0)


def test_roc_metrics_on_planted_scores():
    members = np.r_[np.ones(100, bool), np.zeros(100, bool)]
    perfect = np.r_[np.linspace(1, 2, 100), np.linspace(-1, 0, 100)]
    assert auroc(perfect, members) == 1.0
    assert tpr_at_fpr(perfect, members, 0.001) == 1.0
    inverted = -perfect
    assert auroc(inverted, members) == 0.0
    assert tpr_at_fpr(inverted, members, 0.01) == 0.0
    ties = np.zeros(200)
    assert auroc(ties, members) == 0.5
    fpr, tpr = roc_curve(perfect, members)
    assert fpr[0] == 0 and tpr[-1] == 1 and fpr[-1] == 1
    # one non-member at 0.905 sits just under the top 10 members (i/99 > 0.905 for i >= 90)
    mixed = np.r_[np.linspace(0, 1, 100), np.r_[0.905, np.full(99, -5.0)]]
    assert tpr_at_fpr(mixed, members, 0.0) == pytest.approx(0.10)
    assert tpr_at_fpr(mixed, members, 0.01) == 1.0


def test_bootstrap_interval_brackets_estimate():
    rng = np.random.default_rng(0)
    members = np.r_[np.ones(300, bool), np.zeros(300, bool)]
    scores = np.r_[rng.normal(0.5, 1, 300), rng.normal(0, 1, 300)]
    lo, hi = bootstrap_ci(scores, members, auroc, 300, seed=1)
    assert lo < auroc(scores, members) < hi
    assert 0.55 < lo and hi < 0.75
