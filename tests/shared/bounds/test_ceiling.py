"""The last-iterate ceiling: epsilon against a second method (numerical integration of both hockey-stick
divergences on a grid), and the simulated ideal audit in its two limits."""
import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import binom, norm

from stages.shared.bounds.ceiling import ideal_audit, last_iterate_delta, last_iterate_epsilon
from stages.shared.bounds.gdp import gdp_epsilon_lower_bound
from stages.shared.bounds.one_run import epsilon_lower_bound


def integrated_delta(q, T, sigma, eps, points=60_001):
    """max over both directions of int (P - e^eps Q)_+ on a fine grid (trapezoid rule)."""
    s = math.sqrt(T) * sigma
    x = np.linspace(-14 * s - 1, T + 14 * s + 1, points)
    k = np.arange(T + 1)
    w = binom.pmf(k, T, q)
    mix = np.zeros_like(x)
    for kk in k[w > 1e-18]:
        mix += w[kk] * norm.pdf((x - kk) / s) / s
    base = norm.pdf(x / s) / s
    up = np.trapezoid(np.clip(mix - math.exp(eps) * base, 0, None), x)
    down = np.trapezoid(np.clip(base - math.exp(eps) * mix, 0, None), x)
    return max(up, down)


def integrated_epsilon(q, T, sigma, delta):
    return brentq(lambda e: integrated_delta(q, T, sigma, e) - delta, 0.0, 30.0, xtol=1e-6)


@pytest.mark.parametrize("q,T,sigma,delta", [
    (0.028591851322373123, 80, 0.5706787109375, 1e-5),  # the public point (dp_eps8 of the default profile)
    (0.1, 100, 1.0, 1e-5), (0.01, 500, 0.8, 1e-6), (0.5, 10, 2.0, 1e-3), (1.0, 1, 1.0, 1e-5),
])
def test_matches_numerical_integration(q, T, sigma, delta):
    assert last_iterate_epsilon(q, T, sigma, delta) == pytest.approx(integrated_epsilon(q, T, sigma, delta), rel=0.01)


def test_public_point_and_the_gaussian_case():
    assert last_iterate_epsilon(0.028591851322373123, 80, 0.5706787109375, 1e-5) == pytest.approx(2.65, abs=5e-3)
    # q = 1, T = 1: N(1, sigma^2) vs N(0, sigma^2), the Gaussian mechanism with mu = 1 / sigma
    from stages.shared.bounds.gdp import gdp_epsilon
    assert last_iterate_epsilon(1.0, 1, 0.5, 1e-5) == pytest.approx(gdp_epsilon(2.0, 1e-5), rel=1e-6)
    assert last_iterate_delta(0.1, 50, 1.0, 100.0) == pytest.approx(0.0, abs=1e-12)


def _ideal(sigma, q=0.1, T=30, trials=200, **kw):
    return ideal_audit(q, T, sigma, m=1000, k_pos=kw.get("k_pos", 100), k_neg=kw.get("k_neg", 0), delta=1e-5,
                       confidences=(0.95,), trials=trials, seed=3)


def test_ideal_audit_limits():
    # sigma -> infinity: scores carry no membership signal, the bound is 0
    noisy = _ideal(1e6)
    assert noisy["ideal_eps_lb_95_median"] == 0 and noisy["ideal_gdp_eps_lb_95_median"] == 0
    assert noisy["ideal_eps_lb_95_p90"] < 0.2
    # sigma -> 0 with q T = 3: every "in" guess is a member (95% of members were sampled at least once)
    exact = _ideal(1e-9)
    assert exact["correct_median"] == 100
    for q_name in ("median", "p10", "p90"):
        assert exact[f"ideal_eps_lb_95_{q_name}"] == pytest.approx(epsilon_lower_bound(1000, 100, 100, 1e-5, 0.95))
        assert exact[f"ideal_gdp_eps_lb_95_{q_name}"] == pytest.approx(
            gdp_epsilon_lower_bound(1000, 100, 100, 1e-5, 0.95))


def test_ideal_audit_is_seeded_and_ordered():
    a, b = _ideal(1.0, trials=60), _ideal(1.0, trials=60)
    assert a == b
    assert a["ideal_eps_lb_95_p10"] <= a["ideal_eps_lb_95_median"] <= a["ideal_eps_lb_95_p90"]
    # less noise, higher ceiling
    assert _ideal(0.3, trials=60)["ideal_eps_lb_95_median"] > a["ideal_eps_lb_95_median"]
