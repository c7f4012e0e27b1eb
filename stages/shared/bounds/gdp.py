"""One-run audit under a Gaussian trade-off assumption (Mahloujifar, Melis, Chaudhuri, "Auditing
f-Differential Privacy in One Run", ICML 2025), implemented from the maths.

Same game as ``one_run.py``: m canaries, each a member with probability 1/2; the auditor guesses on r
of them (abstaining on the rest) and v guesses are right. The null hypothesis is now "the training run
is mu-GDP": for every test between a canary's presence and absence, type-II error >= f(type-I error)
with f(x) = Phi(Phi^-1(1 - x) - mu). Equivalently, for any event A, P_in[A] <= b(P_out[A]) with the
blow-up b(x) = Phi(Phi^-1(x) + mu).

Why the recursion below is a valid test. Let C be the number of correct guesses and J a canary drawn
uniformly. The event {J guessed right and C - [J right] >= i - 1} is a test on J's membership that the
adversary could run knowing every other canary's bit, so f-DP (averaged with the concavity of b) gives

    R_i <= b(H_{i-1}),  R_i = E[C 1{C >= i}] / m,  H_i = E[(r - C) 1{C >= i}] / m,   i = 1..r,

and R_0 + H_0 = r / m. Suppose P[C >= v] = tau. The least total R_0 + H_0 those constraints allow puts
the mass tau at C = v (R_v = tau v / m, H_v = tau (r - v) / m) and then, for i = v-1 down to 0, the
least H_i = max(H_{i+1}, b^-1(R_{i+1})), whose extra mass sits at C = i and so adds
i / (r - i) * (H_i - H_{i+1}) to R. If even that least total exceeds r / m, no mu-GDP mechanism gives
P[C >= v] >= tau: the null is rejected at level tau. (tests/audit/test_gdp.py checks this against a
linear program over every distribution of C.)

``gdp_epsilon_lower_bound`` reports the largest mu rejected at the stated confidence, converted to the
epsilon of the Gaussian mechanism at delta (Dong, Roth, Su 2022, Cor. 2.13):
delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2). This is a claim about a Gaussian-shaped
trade-off curve, tighter than the assumption-free bound and not a replacement for it.
"""
from __future__ import annotations

import math
from functools import lru_cache

from scipy.optimize import brentq
from scipy.special import ndtr

from .curve import gaussian_b_inv, rejects_with

#: mu past which a rejection is reported as this mu (an epsilon of several hundred at any usual delta)
MU_MAX = 64.0


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(epsilon) of mu-GDP (the Gaussian mechanism with sensitivity 1 and noise 1/mu)."""
    if mu <= 0:
        return 0.0
    return float(ndtr(-epsilon / mu + mu / 2) - math.exp(epsilon) * ndtr(-epsilon / mu - mu / 2))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon at ``delta`` of mu-GDP (0 when delta is already met at epsilon = 0)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1) for a GDP epsilon (got {delta})")
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2
    return float(brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12))


def gdp_mu(epsilon: float, delta: float) -> float:
    """The mu of the Gaussian mechanism calibrated to (epsilon, delta)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1) (got {delta})")
    hi = 1.0
    while gdp_delta(hi, epsilon) < delta:
        hi *= 2
    return float(brentq(lambda mu: gdp_delta(mu, epsilon) - delta, 1e-12, hi, xtol=1e-12, rtol=1e-12))


def rejects(num_canaries: int, num_guesses: int, num_correct: int, mu: float, level: float) -> bool:
    """True when no mu-GDP mechanism gives P[#correct >= num_correct] >= ``level`` (the recursion above)."""
    return rejects_with(num_canaries, num_guesses, num_correct, gaussian_b_inv(mu), level)


@lru_cache(maxsize=4096)
def gdp_mu_lower_bound(num_canaries: int, num_guesses: int, num_correct: int, confidence: float) -> float:
    """Largest mu whose mu-GDP null hypothesis is rejected at ``confidence`` (0 if none; to 1e-9)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    level = 1.0 - confidence
    test = lambda mu: rejects(num_canaries, num_guesses, num_correct, mu, level)  # noqa: E731
    if not test(1e-9):
        return 0.0
    lo, hi = 1e-9, 1.0
    while test(hi):
        lo, hi = hi, hi * 2
        if hi > MU_MAX:
            return MU_MAX
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if test(mid) else (lo, mid)
    return lo


def gdp_epsilon_lower_bound(num_canaries: int, num_guesses: int, num_correct: int, delta: float,
                            confidence: float) -> float:
    """Largest epsilon such that the Gaussian mechanism calibrated to (epsilon, delta), i.e. mu-GDP, is rejected
    by the f-DP one-run test with abstention at ``confidence``; 0 if none is rejected.

    >>> round(gdp_epsilon_lower_bound(1000, 100, 100, 1e-5, 0.95), 2)
    5.55
    """
    mu = gdp_mu_lower_bound(int(num_canaries), int(num_guesses), int(num_correct), float(confidence))
    return gdp_epsilon(mu, delta) if mu > 0 else 0.0
