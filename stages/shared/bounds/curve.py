"""One-run f-DP test against a run's own trade-off curve (Mahloujifar, Melis, Chaudhuri 2025), and the bound it
gives on the noise: the smallest noise multiplier sigma' whose composed Poisson-subsampled Gaussian curve, at the
run's q and T, the counts reject; reported as the accountant's epsilon at (q, T, sigma') and the run's delta.

The recursion (``gdp.py``'s module doc) needs one thing of the null's curve f: the inverse of the blow-up
b(x) = 1 - f(x). ``rejects_with`` runs it for any such inverse; ``gdp.rejects`` is the Gaussian case. A curve given
by its privacy profile delta(eps) (every (eps, delta(eps)) pair it satisfies) is the envelope

    b(x) = min over eps of min(1, delta(eps) + e^eps x, 1 - e^-eps (1 - delta(eps) - x)),

whose inverse is the largest x any single pair demands:

    b^-1(y) = max(0, max_eps (y - delta(eps)) e^-eps, max_eps 1 - delta(eps) - e^eps (1 - y)).

A finite grid of eps gives a b^-1 no larger than the envelope's, so the test stays valid (only less sharp). For
the subsampled Gaussian the profile comes from opacus's PRV accountant (its discretised privacy-loss distribution
at the accountant's own eps_error, delta_error), made conservative by its error guarantee:
delta(eps) <= delta_est(eps - eps_error) + delta_error. Assumption, stated with every number: the accountant's
profile (opacus's PRV of the Poisson-subsampled Gaussian, the one its epsilon comes from) bounds every test between a
canary's presence and absence, in both directions.
"""
from __future__ import annotations

import functools
import math
import warnings
from typing import Callable

import numpy as np
from scipy.special import ndtr, ndtri

from ..core.privacy import create_accountant
from .one_run import _check

#: the accountant's discretisation errors for the profile (epsilon, delta): small beside any audited epsilon
EPS_ERROR = 0.01
DELTA_ERROR = 1e-9
#: sigma' searched in [SIGMA_MIN, SIGMA_MAX] to a relative tolerance
SIGMA_MIN, SIGMA_MAX, SIGMA_RTOL = 0.2, 50.0, 1e-3

ASSUMPTION = ("a trade-off curve: the composed Poisson-subsampled Gaussian of the run's q and T (the accountant's "
              "privacy profile, both directions), i.e. the accountant's model with only sigma unknown")


def rejects_with(num_canaries: int, num_guesses: int, num_correct: int, b_inv: Callable[[float], float],
                 level: float) -> bool:
    """True when no mechanism whose blow-up inverse is ``b_inv`` gives P[#correct >= num_correct] >= ``level``."""
    m, r, v = int(num_canaries), int(num_guesses), int(num_correct)
    _check(m, r, v)
    if v == 0:
        return False
    h = level * (r - v) / m
    rr = level * v / m
    for i in range(v - 1, -1, -1):
        h_new = max(h, b_inv(min(rr, 1.0)))
        rr += i / (r - i) * (h_new - h)
        h = h_new
        if rr + h > r / m:
            return True
    return rr + h > r / m


def gaussian_b_inv(mu: float) -> Callable[[float], float]:
    """b^-1 of mu-GDP: Phi(Phi^-1(y) - mu)."""
    return lambda y: float(ndtr(ndtri(y) - mu))


def profile_b_inv(eps: np.ndarray, delta: np.ndarray) -> Callable[[float], float]:
    """b^-1 of the envelope of the (eps, delta(eps)) pairs (see the module doc)."""
    eps = np.asarray(eps, dtype=np.float64)
    delta = np.clip(np.asarray(delta, dtype=np.float64), 0.0, 1.0)
    keep = (eps >= 0) & (eps <= 700) & (delta < 1)  # e^eps finite; a pair with delta 1 demands nothing
    eps, delta = eps[keep], delta[keep]
    e_neg, e_pos = np.exp(-eps), np.exp(eps)

    def b_inv(y: float) -> float:
        return float(max(0.0, np.max((y - delta) * e_neg), np.max(1.0 - delta - e_pos * (1.0 - y))))

    return b_inv


@functools.lru_cache(maxsize=512)
def subsampled_gaussian_profile(sample_rate: float, steps: int, noise_multiplier: float) -> tuple[np.ndarray, ...]:
    """(eps, delta(eps)) on eps >= 0 of T compositions of the Poisson-subsampled Gaussian (opacus PRV), each delta
    raised to the accountant's error bound (conservative)."""
    acc = create_accountant("prv")
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    with warnings.catch_warnings(), np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # opacus' cdf overflows in far tails it then truncates
        dprv = acc._get_dprv(eps_error=EPS_ERROR, delta_error=DELTA_ERROR)
    t, p = dprv.domain.ts, dprv.pmf
    with np.errstate(over="ignore", invalid="ignore"):  # e^t overflows far out in the tails: those pairs are dropped
        d1 = np.flip(np.flip(p).cumsum())
        d2 = np.flip(np.flip(p * np.exp(-t)).cumsum())
        delta_est = d1 - np.exp(t) * d2  # delta(t) = P[L >= t] - e^t E[e^-L; L >= t]
    delta_est = np.clip(np.nan_to_num(delta_est, nan=1.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
    eps = t + EPS_ERROR  # delta(eps) <= delta_est(eps - eps_error) + delta_error
    keep = eps >= 0
    return eps[keep], np.minimum(1.0, delta_est[keep] + DELTA_ERROR)


def curve_rejects(m: int, r: int, v: int, sample_rate: float, steps: int, noise_multiplier: float,
                  level: float) -> bool:
    eps, delta = subsampled_gaussian_profile(float(sample_rate), int(steps), float(noise_multiplier))
    return rejects_with(m, r, v, profile_b_inv(eps, delta), level)


def curve_sigma_bound(m: int, r: int, v: int, sample_rate: float, steps: int, confidence: float) -> float | None:
    """The smallest sigma' whose subsampled-Gaussian curve (q, T) the counts reject at ``confidence`` (to
    ``SIGMA_RTOL``, rounded up: a sigma' at or above it is rejected); None when even ``SIGMA_MAX`` is not."""
    level = 1.0 - confidence
    test = lambda s: curve_rejects(m, r, v, sample_rate, steps, s, level)  # noqa: E731
    if r == 0 or not test(SIGMA_MAX):
        return None
    if test(SIGMA_MIN):
        return SIGMA_MIN
    lo, hi = math.log(SIGMA_MIN), math.log(SIGMA_MAX)  # lo: not rejected, hi: rejected
    while hi - lo > SIGMA_RTOL:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if test(math.exp(mid)) else (mid, hi)
    return math.exp(hi)


def curve_epsilon_lower_bound(m: int, r: int, v: int, sample_rate: float, steps: int, delta: float,
                              confidence: float, accountant: str) -> dict:
    """{sigma, epsilon}: the least rejected sigma' and the accountant's epsilon at (q, T, sigma', delta); both 0 /
    None when no sigma' is rejected."""
    sigma = curve_sigma_bound(m, r, v, sample_rate, steps, confidence)
    if sigma is None or not 0 < delta < 1:
        return {"sigma": sigma, "epsilon": 0.0 if sigma is None else None}
    return {"sigma": sigma, "epsilon": accountant_epsilon(sample_rate, steps, sigma, delta, accountant)}


@functools.lru_cache(maxsize=256)
def accountant_epsilon(sample_rate: float, steps: int, noise_multiplier: float, delta: float, accountant: str) -> float:
    """The accountant's epsilon of T steps at (q, sigma) and delta (opacus)."""
    acc = create_accountant(accountant)
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    return float(acc.get_epsilon(delta=float(delta)))
