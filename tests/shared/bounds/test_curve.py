"""The f-DP one-run test against a run's own trade-off curve (stages/shared/bounds/curve.py)."""
import numpy as np
import pytest

from stages.shared.bounds.curve import (
    curve_epsilon_lower_bound,
    gaussian_b_inv,
    profile_b_inv,
    rejects_with,
    subsampled_gaussian_profile,
)
from stages.shared.bounds.gdp import gdp_delta, gdp_epsilon_lower_bound, gdp_mu_lower_bound


def _gaussian_profile(mu):
    eps = np.linspace(0, 40, 40001)
    return eps, np.array([gdp_delta(mu, e) for e in eps])


@pytest.mark.parametrize("m, r, v", [(1000, 100, 90), (3000, 300, 240), (5000, 500, 395)])
def test_the_curve_test_reproduces_the_gdp_bound_when_the_curve_is_gaussian(m, r, v):
    """Fed the Gaussian curve through its privacy profile (the envelope of its (eps, delta(eps)) pairs), the general
    test rejects exactly the mu the closed form does (to the grid's resolution)."""
    mu = gdp_mu_lower_bound(m, r, v, 0.95)
    assert mu > 0
    for factor, expect in ((0.995, True), (1.005, False)):
        b_inv = profile_b_inv(*_gaussian_profile(mu * factor))
        assert rejects_with(m, r, v, b_inv, 0.05) is expect
    b_inv, exact = profile_b_inv(*_gaussian_profile(mu)), gaussian_b_inv(mu)
    for y in (1e-4, 0.01, 0.1, 0.5, 0.9):
        assert b_inv(y) == pytest.approx(exact(y), rel=1e-4, abs=1e-9)
        assert b_inv(y) <= exact(y) + 1e-12  # a finite grid never demands more than the curve: the test stays valid


def test_at_q_1_and_one_step_the_subsampled_curve_is_the_gaussian_one():
    """One step at q = 1 is the Gaussian mechanism: the own-curve bound equals the GDP bound (public point 5.55,
    to the accountant's eps_error)."""
    own = curve_epsilon_lower_bound(1000, 100, 100, 1.0, 1, 1e-5, 0.95, "prv")
    assert own["epsilon"] == pytest.approx(gdp_epsilon_lower_bound(1000, 100, 100, 1e-5, 0.95), abs=0.05)


def test_rejection_is_monotone_in_sigma_and_the_bound_is_below_the_accountant():
    """A larger sigma' claims more privacy, so it is easier to reject; the default profile's pooled counts reject a
    sigma' above the run's own only if the run broke its guarantee."""
    q, T, sigma = 0.2298, 10, 0.8154
    res = curve_epsilon_lower_bound(3000, 300, 240, q, T, 1e-5, 0.95, "prv")
    assert res["sigma"] > sigma and 0 < res["epsilon"] < 8.0
    eps, delta = subsampled_gaussian_profile(q, T, res["sigma"] * 1.01)
    assert rejects_with(3000, 300, 240, profile_b_inv(eps, delta), 0.05)
    eps, delta = subsampled_gaussian_profile(q, T, res["sigma"] * 0.98)
    assert not rejects_with(3000, 300, 240, profile_b_inv(eps, delta), 0.05)
    assert curve_epsilon_lower_bound(3000, 300, 150, q, T, 1e-5, 0.95, "prv") == {"sigma": None, "epsilon": 0.0}
