"""The pooled test of a recipe (its rule fixed in params), seeds' status, and efficiency with its spread.

Pooling (parallel composition). K independent runs of one recipe (``runs.<run>`` and its replicas,
``stages.shared.core.replicas``), each with its own canary draw, membership coins, text sample, sampler and noise, form
one mechanism: a canary is in one run only, so the K models together are (eps, delta)-DP in each canary, and each
canary's inclusion is an independent fair coin. Steinke et al.'s proof needs nothing more, so one test over the
union of the K runs' canaries is a valid one-run audit: m = sum of m_i, and the guessing rule fixed in params
(``audit.pooled.<run>``: the k_pos highest and k_neg lowest primary scores *within each run*, r = K (k_pos + k_neg))
gives (r, v). Assumption: the runs' random streams are independent (each replica its own seed, refused when
repeated; every stream derived from (seed, stream name) by one SeedSequence, ``stages.shared.core.seeds``) and not known
to an adversary who could use them (``secure_rng``); the seeds in params.yaml are published, so with seeded
randomness the accountant's epsilon is the guarantee of the same mechanism with a secret seed.

Seed status. A run's bound is a confirmation only if its seed set's first recorded run is this design, on seeds
committed before it and never used to choose a design (the seed ledger, ``ledger.py``): otherwise it is a development
look (``seed_status``, decided by the caller).

Efficiency. Where a run's count v falls among the ideal audit's simulated counts (its percentile, with its Monte
Carlo standard error: a heuristic reference, ``ceiling.py``); across runs the median percentile with a
distribution-free interval (order statistics) and the coverage that interval has at this many runs. Never one run's
bound divided by the ideal's median.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import binom

from ..finetune.schema import PrivacyRecord
from ..shared.bounds.ceiling import ideal_counts, percentile_mc, summarise_trials, trial_bounds
from ..shared.bounds.curve import ASSUMPTION as CURVE_ASSUMPTION
from ..shared.bounds.keys import BoundKeys, clip_guesses
from ..shared.bounds.one_run import guesses
from ..shared.core.seeds import DERIVATION, stream
from .primary import bounds, curve_bounds


def median_interval(values, confidence: float = 0.95) -> dict:
    """The median of ``values`` and the widest-needed order-statistic interval [x_(j), x_(n-j+1)] covering the
    population median with probability >= ``confidence``, or the full range and its (lower) coverage when n is too
    small for that: coverage = 1 - 2 P[Bin(n, 1/2) <= j - 1]."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n == 0:
        return {"median": None, "low": None, "high": None, "coverage": None, "n": 0}
    j = 1
    while j + 1 <= n // 2 and 1 - 2 * binom.cdf(j, n, 0.5) >= confidence:
        j += 1
    coverage = float(1 - 2 * binom.cdf(j - 1, n, 0.5))
    return {"median": float(np.median(x)), "low": float(x[j - 1]), "high": float(x[n - j]), "coverage": coverage,
            "n": n}


def ideal_pooled(privacy: PrivacyRecord, ms: list[int], k_pos: int, k_neg: int, trials: int, seed: int) -> np.ndarray:
    """(trials, 3) simulated pooled counts (m, r, v): each trial K independent ideal runs (``ceiling.ideal_counts``,
    the same per-run rule), summed."""
    q, T, sigma = privacy.sample_rate, privacy.steps, privacy.noise_multiplier
    per_run = [np.array(ideal_counts(q, T, sigma, m=m, k_pos=k_pos, k_neg=k_neg, trials=trials,
                                 seed=stream("audit.ideal_pooled").int_seed(seed, key=str(i))))
               for i, m in enumerate(ms)]
    return np.sum(per_run, axis=0)


def pooled_test(members: list[dict], rule: tuple[int, int], delta: float, params, status: str) -> dict:
    """The pooled test of one recipe. ``members``: per run {run, seeds, privacy, scores, labels} (primary attack and
    kind), the recipe's own run first; every run must share the recipe's privacy parameters. ``status``: the seed
    set's ledger status (``ledger.SeedStatus``), which its single runs share."""
    first = members[0]["privacy"]
    keys = ("sample_rate", "steps", "noise_multiplier", "epsilon_spent", "delta", "optimizer")
    for mem in members[1:]:
        diff = [k for k in keys if getattr(mem["privacy"], k) != getattr(first, k)]
        if diff:
            raise ValueError(f"run {mem['run']} differs from {members[0]['run']} in {', '.join(diff)}: "
                             "replicas of a recipe must share its privacy parameters")
    confidences = params.confidences
    singles, counts = [], []
    for mem in members:
        m, r, v = guesses(mem["scores"], mem["labels"], *rule)
        counts.append((m, r, v))
        singles.append({"run": mem["run"], "seeds": list(mem["seeds"]), "seed_status": status, "m": m, "r": r,
                        "v": v, **bounds(m, r, v, delta, confidences, gdp=True)})
    m, r, v = (int(sum(c[i] for c in counts)) for i in range(3))
    k_pos, k_neg = clip_guesses(*rule, min(c[0] for c in counts))
    all_seeds = [s for mem in members for s in mem["seeds"]]
    out = {"recipe": members[0]["run"], "runs": [mem["run"] for mem in members], "seeds": sorted(set(all_seeds)),
           "seed_status": status, "k_pos_per_run": k_pos, "k_neg_per_run": k_neg,
           "m": m, "r": r, "v": v, "delta": delta, "accountant_epsilon": float(first.epsilon_spent),
           "sample_rate": first.sample_rate, "steps": first.steps,
           "noise_multiplier": first.noise_multiplier, "optimizer": first.optimizer,
           "secure_rng": bool(first.secure_rng),
           **bounds(m, r, v, delta, confidences, gdp=True), **curve_bounds(m, r, v, first, delta, confidences),
           "curve_assumption": CURVE_ASSUMPTION, "streams": DERIVATION}
    trials, seed = params.ceiling.trials, params.ceiling.seed
    pooled = ideal_pooled(first, [c[0] for c in counts], k_pos, k_neg, trials, seed)
    out["ideal_trials"] = int(trials)
    out["ideal_correct_median"] = float(np.median(pooled[:, 2]))
    out["ideal_percentile"], out["ideal_percentile_mcse"] = percentile_mc(v, pooled[:, 2])
    for c in confidences:
        for name, gdp in (("eps_lb", False), ("gdp_eps_lb", True)):
            vals = trial_bounds([tuple(int(x) for x in row) for row in pooled], delta, c, gdp)
            out.update(summarise_trials(vals, BoundKeys(c), name))
    per_m: dict[int, np.ndarray] = {}  # runs of one m share the same simulated counts (same seed): drawn once
    for single, (mi, _, vi) in zip(singles, counts):
        if mi not in per_m:
            per_m[mi] = np.array(ideal_counts(first.sample_rate, first.steps, first.noise_multiplier, m=mi,
                                              k_pos=k_pos, k_neg=k_neg, trials=trials, seed=seed))[:, 2]
        single["ideal_percentile"], single["ideal_percentile_mcse"] = percentile_mc(vi, per_m[mi])
    out["single_runs"] = singles
    out["efficiency"] = {"what": "percentile of each run's count v among the ideal audit's simulated counts "
                                 "(heuristic linear last-iterate model); median over runs, distribution-free interval",
                         **median_interval([s["ideal_percentile"] for s in singles])}
    return out


def design_look(per_run: list[tuple[np.ndarray, np.ndarray, np.ndarray]], ks: list[int], delta: float,
                pool_size: int, confidence: float = 0.95, subsample: int | None = None,
                subsample_seed: int = 0) -> dict:
    """A development look at the pooled rule: for each per-run ``k`` ("in" guesses, none "out"), each run's count of
    the k highest scores, and the median Steinke bound over every ``pool_size``-subset of the runs (pooled counts).

    ``per_run``: (scores, labels, canary ids) of each run. ``subsample``: judge each run on a seeded random subset of
    this many canaries (``numpy.random.default_rng(subsample_seed).permutation`` over the run's ids in sorted order,
    the first ``subsample``), the proxy for a run with fewer canaries. Uncorrected: a look that informs a choice,
    never a claim."""
    from itertools import combinations

    from ..shared.bounds.one_run import epsilon_lower_bound

    counts: list[dict[int, tuple[int, int, int]]] = []
    for scores, labels, ids in per_run:
        scores, labels, ids = np.asarray(scores, dtype=np.float64), np.asarray(labels, bool), np.asarray(ids)
        order = np.argsort(ids, kind="stable")
        scores, labels = scores[order], labels[order]
        if subsample is not None:
            keep = np.random.default_rng(subsample_seed).permutation(len(scores))[:subsample]
            keep.sort()
            scores, labels = scores[keep], labels[keep]
        counts.append({k: guesses(scores, labels, k, 0) for k in ks})
    subsets = list(combinations(range(len(per_run)), pool_size))
    medians = {}
    for k in ks:
        bounds_k = []
        for sub in subsets:
            m, r, v = (sum(counts[i][k][j] for i in sub) for j in range(3))
            bounds_k.append(epsilon_lower_bound(m, r, v, delta, confidence))
        medians[k] = float(np.median(bounds_k))
    best = max(ks, key=lambda k: (medians[k], -k))
    return {"v": [{str(k): c[k][2] for k in ks} for c in counts], "m": [c[ks[0]][0] for c in counts],
            "pool_size": pool_size, "subsets": len(subsets), "confidence": confidence, "delta": delta,
            "median_pooled_eps_lb": {str(k): medians[k] for k in ks}, "best_k": best,
            "best_median": medians[best]}
