"""One-run privacy audit (Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run",
NeurIPS 2023), implemented from the maths.

Setting: m canaries, each included in training independently with probability 1/2. After training
the auditor guesses "in" for some canaries, "out" for others and abstains on the rest; r guesses,
v of them correct. If training is (eps, delta)-DP, the number of correct guesses W satisfies
(their Theorem 5.2, which specialises to Theorem 3.1 when delta = 0):

    P[W >= v] <= P[Binomial(r, p) >= v] + 2 m delta * max_{i=1..v} (1/i) P[v > Binomial(r, p) >= v - i],

with p = e^eps / (1 + e^eps), the accuracy of eps-DP randomized response. The right-hand side is
the p-value of observing v; eps_hat is the largest eps whose null hypothesis "(eps, delta)-DP" is
rejected at the stated confidence, i.e. the supremum of eps with p-value < 1 - confidence. The
p-value increases with eps, so the rejected set is an interval [0, eps_hat) found by bracketing and
bisection to 1e-9.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import bdtrc

from .keys import clip_guesses


def _check(m: int, r: int, v: int) -> None:
    if not (0 <= v <= r <= m):
        raise ValueError(f"need 0 <= num_correct <= num_guesses <= num_canaries (got v={v}, r={r}, m={m})")


def _pmf_down(v: int, r: int, p: float) -> np.ndarray:
    """[pmf(v-1), pmf(v-2), ..., pmf(0)] of Binomial(r, p): pmf(v-1) from log-gamma, the rest by the ratio
    pmf(k-1) / pmf(k) = k (1-p) / ((r-k+1) p) (a cumulative product; scipy's pmf per call costs 20x more, and the
    bisection below evaluates this hundreds of times per bound)."""
    if p >= 1.0:
        return np.zeros(v)  # all mass at r >= v > v - 1
    k = v - 1
    log_top = (math.lgamma(r + 1) - math.lgamma(k + 1) - math.lgamma(r - k + 1) + k * math.log(p)
               + (r - k) * math.log1p(-p))
    ks = np.arange(k, 0, -1, dtype=np.float64)  # k, k-1, ..., 1: pmf(j-1) = pmf(j) * j (1-p) / ((r-j+1) p)
    log_ratios = np.log(ks) + math.log1p(-p) - np.log(r - ks + 1.0) - math.log(p)
    return np.exp(log_top + np.r_[0.0, np.cumsum(log_ratios)])  # in logs: the product under- or overflows


def p_value(num_canaries: int, num_guesses: int, num_correct: int, epsilon: float, delta: float) -> float:
    """Upper bound on P[#correct >= v] under (epsilon, delta)-DP (the one-run audit p-value)."""
    m, r, v = int(num_canaries), int(num_guesses), int(num_correct)
    _check(m, r, v)
    if epsilon < 0 or not (0 <= delta <= 1):
        raise ValueError(f"need epsilon >= 0 and delta in [0, 1] (got {epsilon}, {delta})")
    p = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(bdtrc(v - 1, r, p)) if v > 0 else 1.0  # P[Bin(r, p) >= v]
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    # S_i = P[v - i <= Bin < v] = sum_{k=v-i}^{v-1} pmf(k), for i = 1..v
    pmf = _pmf_down(v, r, p)  # pmf(v-1), pmf(v-2), ..., pmf(0)
    alpha = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1)))
    return min(tail + 2.0 * m * delta * alpha, 1.0)


def epsilon_lower_bound(num_canaries: int, num_guesses: int, num_correct: int, delta: float,
                        confidence: float) -> float:
    """Largest epsilon such that (epsilon, delta)-DP is rejected at ``confidence`` (0 if none).

    >>> round(epsilon_lower_bound(1000, 100, 100, 1e-5, 0.99), 2)
    2.99
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    alpha = 1.0 - confidence
    f = lambda eps: p_value(num_canaries, num_guesses, num_correct, eps, delta)  # noqa: E731
    if f(0.0) >= alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while f(hi) < alpha:
        lo, hi = hi, hi * 2
        if hi > 1e4:  # pragma: no cover - unreachable for finite r
            return math.inf
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        if f(mid) < alpha:
            lo = mid
        else:
            hi = mid
    return lo


def guesses(scores, members, k_pos: int, k_neg: int) -> tuple[int, int, int]:
    """(m, r, v) for the k_pos highest scores guessed "in" and the k_neg lowest guessed "out".

    Ties are broken by canary order (stable sort), never by membership. m counts every canary."""
    if np.isnan(np.asarray(scores, dtype=np.float64)).any():
        raise ValueError("scores contain NaN")
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(members, dtype=bool)
    m = len(s)
    k_pos, k_neg = clip_guesses(k_pos, k_neg, m)
    order = np.argsort(-s, kind="stable")
    v = int(y[order[:k_pos]].sum() + (~y[order[m - k_neg:]]).sum()) if k_neg else int(y[order[:k_pos]].sum())
    return m, k_pos + k_neg, v
