"""The Gaussian-DP one-run bound against an independent reference: a linear program over every distribution
of the number of correct guesses (cutting planes on the f-DP constraints), and the mu -> epsilon conversion
by numerical integration of the hockey-stick divergence between N(mu, 1) and N(0, 1)."""
import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.optimize import brentq, linprog
from scipy.stats import norm

from stages.shared.bounds.gdp import (
    gdp_delta,
    gdp_epsilon,
    gdp_epsilon_lower_bound,
    gdp_mu,
    gdp_mu_lower_bound,
    rejects,
)
from stages.shared.bounds.one_run import epsilon_lower_bound


def _b(x, mu):
    return norm.cdf(norm.ppf(np.clip(x, 0, 1)) + mu)


def _db(x, mu):
    return np.exp(-mu * norm.ppf(x) - mu * mu / 2)


def lp_max_tail(m, r, v, mu, tol=1e-10):
    """max P[C >= v] over all distributions (p_0..p_r) of the correct-guess count C subject to
    R_i <= b(H_{i-1}) for i = 1..r, the blow-up b being concave: its tangents make it a linear program,
    refined with a cut at every violated point until no constraint is violated by more than tol."""
    j = np.arange(r + 1)
    ge = (j[None, :] >= j[:, None]).astype(float)
    R, H = ge * j / m, ge * (r - j) / m
    idx = np.arange(1, r + 1)
    pts = np.logspace(-12, -1e-9, 16)
    A = (R[idx][:, None, :] - _db(pts, mu)[None, :, None] * H[idx - 1][:, None, :]).reshape(-1, r + 1)
    B = np.broadcast_to(_b(pts, mu) - _db(pts, mu) * pts, (r, len(pts))).reshape(-1)
    for _ in range(300):
        res = linprog(-(j >= v).astype(float), A_ub=A, b_ub=B, A_eq=np.ones((1, r + 1)), b_eq=[1.0],
                      bounds=(0, None), method="highs",
                      options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
        Ri, Hi = R @ res.x, H @ res.x
        bad = np.nonzero(Ri[1:] - _b(Hi[:-1], mu) > tol)[0] + 1
        if not len(bad):
            return -res.fun
        h0 = np.clip(Hi[bad - 1], 1e-300, 1 - 1e-12)
        A = np.vstack([A, R[bad] - _db(h0, mu)[:, None] * H[bad - 1]])
        B = np.concatenate([B, _b(h0, mu) - _db(h0, mu) * h0])
    raise AssertionError("cutting planes did not converge")


def lp_mu_lower_bound(m, r, v, conf):
    f = lambda mu: lp_max_tail(m, r, v, mu) - (1 - conf)  # noqa: E731
    if f(1e-6) >= 0:
        return 0.0
    hi = 1.0
    while f(hi) < 0:
        hi *= 2
    return brentq(f, 1e-6, hi, xtol=1e-8)


def integrated_delta(mu, eps):
    """int (phi(x - mu) - e^eps phi(x))_+ dx, numerically."""
    x0 = eps / mu + mu / 2  # where the densities cross
    return quad(lambda x: norm.pdf(x - mu) - math.exp(eps) * norm.pdf(x), x0, np.inf, epsabs=1e-14)[0]


def reference_epsilon(mu, delta):
    if mu == 0 or integrated_delta(mu, 0.0) <= delta:
        return 0.0
    return brentq(lambda e: integrated_delta(mu, e) - delta, 0.0, 200.0, xtol=1e-10)


# grid: the public point, fewer/more correct guesses, smaller/larger canary sets, both confidences,
# several deltas; and a point with no evidence (58 of 100 right)
# (the reference LP takes seconds at m = 1000: those points are in the slow tier; the public point's value is also
# checked in the fast tier by test_public_point_and_tighter_than_assumption_free)
GRID = [*[pytest.param(*g, marks=pytest.mark.slow) for g in [
            (1000, 100, 100, 1e-5, 0.95), (1000, 100, 80, 1e-5, 0.95), (1000, 100, 67, 1e-5, 0.99),
            (1000, 100, 58, 1e-5, 0.95)]],
        (200, 50, 40, 1e-6, 0.99), (100, 20, 18, 1e-3, 0.9), (500, 40, 40, 1e-5, 0.95)]


@pytest.mark.parametrize("m,r,v,delta,conf", GRID)
def test_matches_the_linear_program_reference(m, r, v, delta, conf):
    mu_ref = lp_mu_lower_bound(m, r, v, conf)
    assert gdp_mu_lower_bound(m, r, v, conf) == pytest.approx(mu_ref, abs=1e-5)
    assert gdp_epsilon_lower_bound(m, r, v, delta, conf) == pytest.approx(reference_epsilon(mu_ref, delta), abs=2e-3)


def test_public_point_and_tighter_than_assumption_free():
    assert gdp_epsilon_lower_bound(1000, 100, 100, 1e-5, 0.95) == pytest.approx(5.55, abs=5e-3)
    assert epsilon_lower_bound(1000, 100, 100, 1e-5, 0.95) < gdp_epsilon_lower_bound(1000, 100, 100, 1e-5, 0.95)


def test_conversions_are_inverse_and_monotone():
    for mu in (0.3, 1.0, 2.5):
        eps = gdp_epsilon(mu, 1e-5)
        assert gdp_delta(mu, eps) == pytest.approx(1e-5, rel=1e-6)
        assert gdp_mu(eps, 1e-5) == pytest.approx(mu, rel=1e-6)
    assert gdp_epsilon(0.0, 1e-5) == 0.0
    # rejection is monotone: a smaller mu (more private) is rejected whenever a larger one is
    flags = [rejects(1000, 100, 80, mu, 0.05) for mu in np.linspace(0.05, 1.5, 30)]
    assert flags == sorted(flags, reverse=True) and flags[0] and not flags[-1]


def test_bad_counts_raise():
    with pytest.raises(ValueError, match="num_correct <= num_guesses"):
        gdp_epsilon_lower_bound(10, 5, 6, 1e-5, 0.95)
    with pytest.raises(ValueError, match="confidence"):
        gdp_epsilon_lower_bound(10, 5, 5, 1e-5, 1.0)
