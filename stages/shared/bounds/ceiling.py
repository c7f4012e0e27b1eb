"""The attainable ceiling of a DP run's audit, from its own q, T, sigma and delta (a heuristic model).

The linear last-iterate model (Steinke et al., "The Last Iterate Advantage", ICLR 2025): the auditor sees
only the final model, and a canary's effect on it is its summed clipped gradients projected on one
direction. With sensitivity 1 and per-step noise sigma, a non-member's statistic is N(0, T sigma^2) and a
member's is K + N(0, T sigma^2) with K ~ Binomial(T, q), the number of steps that sampled it. The
privacy loss L(x) = log sum_k Bin(k; T, q) exp((k x - k^2 / 2) / s^2), s^2 = T sigma^2, increases with x,
so each hockey-stick divergence is a difference of normal tails at the point x* where L(x*) = +-epsilon:

    delta_in(eps)  = sum_k Bin(k) Phibar((x* - k)/s) - e^eps Phibar(x*/s),   L(x*) = eps
    delta_out(eps) = Phi(x'/s) - e^eps sum_k Bin(k) Phi((x' - k)/s),          L(x') = -eps

``last_iterate_epsilon`` is the least eps with max(delta_in, delta_out) <= delta. It is a heuristic: DP-SGD's
accountant bounds every intermediate model, and real gradients are not one fixed direction, so the
accountant's epsilon is at least this one. ``ideal_audit`` simulates the pre-registered one-run test on
canaries that follow this model exactly: the median of a heuristic simulation for an ideal white-box statistic,
a reference point a valid audit can exceed (it is not a bound). It is a distribution: a run's count is read by its
percentile in it, never as a ratio of one run's bound to the ideal's median.

Monte Carlo error. Every simulated quantile carries its error from the finite number of trials n
(``quantile_mc``): the distribution-free order-statistic interval [x_(j), x_(k)], j, k = n p -+ z sqrt(n p (1 - p)),
covers the population quantile with probability ~95 %, and its half-width over z is reported as the standard
error (0 when the bound is discrete and the interval collapses on one value); a percentile, a mean of
1{V < v} + 1{V = v} / 2 over the trials, carries its binomial standard error (``percentile_mc``).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import logsumexp, ndtr
from scipy.stats import binom

from ..core.privacy import calibrate_sigma
from .gdp import gdp_epsilon_lower_bound
from .keys import BoundKeys, clip_guesses, mc_interval_key, mcse_key
from .one_run import epsilon_lower_bound, guesses


def _mixture(sample_rate: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(k, log Bin(k; T, q)) for the k that carry any mass."""
    k = np.arange(int(steps) + 1, dtype=np.float64)
    logw = binom.logpmf(k, int(steps), sample_rate)
    keep = logw > -745
    return k[keep], logw[keep]


def _loss(x: float, k: np.ndarray, logw: np.ndarray, s2: float) -> float:
    return float(logsumexp(logw + (k * x - k * k / 2) / s2))


def _solve_loss(target: float, k: np.ndarray, logw: np.ndarray, s: float) -> float | None:
    """x with L(x) = target (None when L never gets there: L ranges over (log w_0, inf))."""
    s2 = s * s
    floor = logw[0] if k[0] == 0 else -math.inf
    if target <= floor:
        return None
    lo, hi = -s - 1.0, k[-1] + s + 1.0
    while _loss(lo, k, logw, s2) > target:
        lo = 2 * lo - 1
    while _loss(hi, k, logw, s2) < target:
        hi = 2 * hi + 1
    return float(brentq(lambda x: _loss(x, k, logw, s2) - target, lo, hi, xtol=1e-13, rtol=1e-13))


def last_iterate_delta(sample_rate: float, steps: int, noise_multiplier: float, epsilon: float) -> float:
    """max of the two hockey-stick divergences between N(0, T sigma^2) and sum_k Bin(k; T, q) N(k, T sigma^2)."""
    k, logw = _mixture(sample_rate, steps)
    s = math.sqrt(steps) * noise_multiplier
    w = np.exp(logw)
    out = 0.0
    x = _solve_loss(epsilon, k, logw, s)
    if x is not None:
        out = max(out, float(np.sum(w * ndtr((k - x) / s)) - math.exp(epsilon) * ndtr(-x / s)))
    x = _solve_loss(-epsilon, k, logw, s)
    if x is not None:
        out = max(out, float(ndtr(x / s) - math.exp(epsilon) * np.sum(w * ndtr((x - k) / s))))
    return max(out, 0.0)


def last_iterate_epsilon(sample_rate: float, steps: int, noise_multiplier: float, delta: float) -> float:
    """epsilon(delta) of the linear last-iterate model (see the module doc).

    >>> round(last_iterate_epsilon(0.028591851322373123, 80, 0.5706787109375, 1e-5), 2)
    2.65
    """
    if not (0 < sample_rate <= 1 and steps >= 1 and noise_multiplier > 0 and 0 < delta < 1):
        raise ValueError(f"need 0 < q <= 1, T >= 1, sigma > 0, 0 < delta < 1 (got {sample_rate}, {steps}, "
                         f"{noise_multiplier}, {delta})")
    f = lambda eps: last_iterate_delta(sample_rate, steps, noise_multiplier, eps) - delta  # noqa: E731
    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2
    return float(brentq(f, 0.0, hi, xtol=1e-10, rtol=1e-10))


def ideal_counts(sample_rate: float, steps: int, noise_multiplier: float, *, m: int, k_pos: int, k_neg: int,
                 trials: int, seed: int, rows: int = 1) -> list[tuple[int, int, int]]:
    """(m, r, v) of ``trials`` simulated one-run tests on m canaries that follow the last-iterate model: members
    drawn with probability 1/2 per canary, the same guessing rule (k_pos highest "in", k_neg lowest "out").
    ``rows``: each canary is that many rows sampled independently at ``sample_rate`` whose clipped gradients add along
    one direction (a canary user with k rows under example-level DP: Bin(rows T, q) inclusions against the same
    noise); 1 is a single row, or a user sampled and clipped as one unit under user-level DP."""
    rng = np.random.default_rng(seed)
    s = math.sqrt(steps) * noise_multiplier
    counts = []
    for _ in range(int(trials)):
        members = rng.random(m) < 0.5
        scores = (rng.binomial(int(rows) * steps, sample_rate, size=m) * members
                  + rng.normal(0.0, 1.0, size=m) * s)
        counts.append(guesses(scores, members, k_pos, k_neg))
    return counts


def trial_bounds(counts: list[tuple[int, int, int]], delta: float, confidence: float, gdp: bool = False) -> np.ndarray:
    """The Steinke (or, with ``gdp``, the Gaussian-DP) bound of each simulated trial (computed once per distinct
    (m, r, v): a few dozen of them, however many trials)."""
    bound = gdp_epsilon_lower_bound if gdp else epsilon_lower_bound
    keys = [tuple(int(c) for c in x) for x in counts]
    cache = {x: bound(*x, delta, confidence) for x in set(keys)}
    return np.array([cache[x] for x in keys], dtype=np.float64)


#: the normal quantile of the Monte Carlo intervals (two-sided 95 %)
MC_Z = 1.959963984540054


def quantile_mc(values, q: float) -> dict:
    """The ``q`` quantile (0-100, numpy's linear interpolation) of simulated ``values`` with its Monte Carlo error:
    the order-statistic interval [x_(j), x_(k)], j, k = n p -+ z sqrt(n p (1 - p)) (1-based, clipped to 1..n),
    which covers the population quantile with probability ~95 % whatever the distribution, and se = its width / 2z."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n, p = len(x), q / 100.0
    half = MC_Z * math.sqrt(n * p * (1 - p))
    j = min(max(int(math.floor(n * p - half)), 1), n)
    k = min(max(int(math.ceil(n * p + half)), 1), n)
    lo, hi = float(x[j - 1]), float(x[k - 1])
    return {"value": float(np.percentile(x, q)), "low": lo, "high": hi, "se": (hi - lo) / (2 * MC_Z)}


def percentile_mc(value: float, sample) -> tuple[float, float]:
    """(mid-rank percentile of ``value`` in ``sample``, its Monte Carlo standard error): the mean over trials of
    100 (1{V < v} + 1{V = v} / 2) and that mean's binomial standard error."""
    sample = np.asarray(sample)
    z = 100 * ((sample < value) + 0.5 * (sample == value))
    n = len(z)
    return float(np.mean(z)), float(np.std(z, ddof=1) / math.sqrt(n)) if n > 1 else math.nan


def summarise_trials(vals, keys: BoundKeys, name: str) -> dict:
    """The median and 10% / 90% quantiles of simulated bounds of statistic ``name`` (``keys.ideal``), each with its
    Monte Carlo error (``mcse_key``) and its order-statistic interval (``mc_interval_key``: what the report prints,
    since a bound moves in steps and a quantile on a step's edge has a small standard error and a wide interval)."""
    out = {}
    for summary, q in (("median", 50), ("p10", 10), ("p90", 90)):
        mc = quantile_mc(vals, q)
        out[keys.ideal(name, summary)] = mc["value"]
        out[mcse_key(keys.ideal(name, summary))] = mc["se"]
        out[mc_interval_key(keys.ideal(name, summary))] = [mc["low"], mc["high"]]
    return out


def ideal_audit(sample_rate: float, steps: int, noise_multiplier: float, *, m: int, k_pos: int, k_neg: int,
                delta: float, confidences, trials: int, seed: int, counts: list | None = None) -> dict:
    """Simulate the one-run test on m canaries that follow the last-iterate model: the Steinke and GDP
    bounds of each trial, summarised as median and 10% / 90% quantiles per confidence, each with its Monte Carlo
    standard error (``..._mcse``; see the module doc). ``counts``: the trials ``ideal_counts`` draws for exactly
    these arguments, when the caller has drawn them already (they are not drawn twice).

    This is a heuristic ceiling, not a limit: an ideal white-box statistic under the linear model (every inclusion
    adds one clipped gradient along a fixed direction, nothing else moves it). A valid audit can exceed it (real
    training is not linear, and the accountant's epsilon bounds every intermediate model). Members are drawn
    with probability 1/2 per canary, as in the real audit; the same guessing rule and delta. Seeded: the same
    arguments give the same numbers.
    """
    if counts is None:
        counts = ideal_counts(sample_rate, steps, noise_multiplier, m=m, k_pos=k_pos, k_neg=k_neg, trials=trials,
                              seed=seed)
    out: dict = {"trials": int(trials), "seed": int(seed), "correct_median": float(np.median([c[2] for c in counts]))}
    for c in confidences:
        for name, gdp in (("eps_lb", False), ("gdp_eps_lb", True)):
            out.update(summarise_trials(trial_bounds(counts, delta, c, gdp), BoundKeys(c), name))
    return out


def planned_ceiling(regime, primary, confidences, trials: int, seed: int) -> dict:
    """The ceiling of a DP regime that was not run (e.g. the GPU preset): sigma calibrated by opacus's accountant
    to (epsilon, delta) at its q and T, then the last-iterate epsilon and the ideal primary test on its m canaries."""
    sigma = calibrate_sigma(regime.epsilon, regime.delta, regime.sample_rate, regime.steps, regime.accountant)
    k_pos, k_neg = clip_guesses(primary.k_pos, primary.k_neg, regime.canaries)
    ideal = ideal_audit(regime.sample_rate, regime.steps, sigma, m=regime.canaries, k_pos=k_pos, k_neg=k_neg,
                        delta=regime.delta,
                        confidences=confidences, trials=trials, seed=seed)
    return {"sample_rate": regime.sample_rate, "steps": regime.steps, "noise_multiplier": sigma,
            "delta": regime.delta, "accountant": regime.accountant, "accountant_epsilon": regime.epsilon,
            "m": regime.canaries, "last_iterate_epsilon": last_iterate_epsilon(regime.sample_rate, regime.steps,
                                                                                sigma, regime.delta),
            **{k: v for k, v in ideal.items() if k.startswith("ideal_")}, "ideal_trials": ideal["trials"]}
