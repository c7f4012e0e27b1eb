"""The distribution-shift check: is a non-randomised pool's blind baseline significantly above chance, and how
large a shift could the check have seen at that pool's size?

Each pool (a run's trained vs held-out text rows, its held-in vs held-out users) scored by the model-free
blind attack (stages/attack/blind.py) gets a one-sided Mann-Whitney p-value of "blind AUROC <= 0.5" (its exact
permutation distribution below ``audit.min_per_side`` on a side, the tie-corrected normal approximation above).
Runs that score the same rows with the same labels (same pool fingerprint) share one pool, tested once: the
distinct pools form one family, Bonferroni-corrected at ``audit.shift_check.alpha``.

The guard states its power: the smallest blind AUROC it flags with probability ``shift_check.power`` at the
pool's size and per-test level, by simulation (``detectable_auroc``). A pool's verdict, per run that
scores it (runs share a pool's rows, not their attacks' strength), is
- ``shift``: flagged; its membership-inference numbers measure the shift between its two sides, not leakage;
- ``too_weak``: not flagged, but a shift as large as the run's largest model-based AUROC on it would be flagged less
  often than that: the check could not have told that MIA result from a shift ("guard too weak at this size");
- ``no_shift``: not flagged, and a shift that large would have been flagged at least that often.
The comparison assumes the blind classifier reads a shift about as well as a model-based attack does, which is
an assumption (the report says so), not a guarantee.
"""
from __future__ import annotations

import math

import numpy as np

from .roc import auroc, auroc_p_value, bootstrap_aurocs, too_small


def blind_pool(scores, members, notes: dict, params) -> dict:
    """One pool's blind baseline: AUROC with its 95% stratified bootstrap interval (none below
    ``min_per_side`` on a side), the one-sided p-value of "AUROC <= 0.5", its test, and what differs."""
    y = np.asarray(members, dtype=bool)
    small = too_small(y, params.min_per_side)
    ci = None
    if not small:
        lo, hi = np.nanpercentile(bootstrap_aurocs(scores, y, params.bootstrap, params.seed), [2.5, 97.5])
        ci = (float(lo), float(hi))
    return {"items": notes["items"], "folds": notes["folds"], "pool": notes["pool"], "members": int(y.sum()),
            "non_members": int((~y).sum()), "auroc": auroc(scores, y), "auroc_ci95": ci,
            "test": "exact Mann-Whitney (permutation)" if small else "Mann-Whitney (normal approximation)",
            "p_value": auroc_p_value(scores, y, exact=small), "differences": notes["differences"]}


def detectable_auroc(members: int, non_members: int, level: float, exact: bool, power: float, trials: int,
                     seed: int, step: float = 0.005) -> dict:
    """The smallest AUROC on a grid of ``step`` from 0.5 to 1 that the one-sided Mann-Whitney test at ``level``
    (exact or normal, as the check runs it) flags in at least ``power`` of ``trials`` simulated pools of this
    size: members' scores N(d, 1), non-members' N(0, 1), AUROC = Phi(d / sqrt 2) (binormal: the test is rank-based,
    so only the AUROC and the sizes matter where scores do not tie). The same normal draws serve every d (common
    random numbers), so the flagged share rises with d and a bisection finds the first grid point. ``auroc``
    None: not even AUROC 1 is flagged that often (too few items for the level)."""
    from scipy.stats import mannwhitneyu, norm

    rng = np.random.default_rng(seed)
    z1, z0 = rng.standard_normal((trials, members)), rng.standard_normal((trials, non_members))
    method = "exact" if exact else "asymptotic"

    def share(a: float) -> float:
        if a >= 1.0:  # perfect separation: every member above every non-member
            d = 2 * (np.abs(z1).max() + np.abs(z0).max()) + 1.0
        else:
            d = math.sqrt(2) * float(norm.ppf(a))
        p = mannwhitneyu(z1 + d, z0, axis=1, alternative="greater", method=method).pvalue
        return float(np.mean(p <= level))

    grid = np.round(np.arange(0.5, 1.0 + step / 2, step), 6)
    lo, hi = 0, len(grid) - 1
    top = share(float(grid[hi]))
    if top < power:
        return {"auroc": None, "power": power, "share_at_auroc_1": top, "trials": trials, "level": level}
    while lo < hi:  # the first grid index whose share reaches power
        mid = (lo + hi) // 2
        if share(float(grid[mid])) >= power:
            hi = mid
        else:
            lo = mid + 1
    return {"auroc": float(grid[lo]), "power": power, "flagged_share": share(float(grid[lo])), "trials": trials,
            "level": level}


def _largest_model_auroc(r: dict, group: str) -> tuple[float, str] | None:
    """The run's largest model-based AUROC on the pool: (AUROC, attack)."""
    found = [(groups[group]["auroc"], atk) for atk, groups in r["attacks"].items()
             if group in groups and groups[group].get("auroc") is not None and not math.isnan(groups[group]["auroc"])]
    return max(found, default=None)


def verdict(flagged: bool, detectable: float | None, largest: float | None) -> str:
    """``shift`` / ``too_weak`` / ``no_shift`` (module docstring)."""
    if flagged:
        return "shift"
    if detectable is None or largest is None or largest < detectable:
        return "too_weak"
    return "no_shift"


def shift_check(runs: dict[str, dict], params) -> dict:
    """Test each distinct pool once at alpha / (number of distinct pools) and state the guard's power there; each
    run sharing the pool gets its verdict from its own attacks' largest AUROC on it (``flagged``, ``verdict`` and
    ``detectable_auroc`` in its copy of the pool, in place). Returns the family and one row per distinct pool."""
    sc = params.shift_check
    distinct: dict[str, list[tuple[str, str]]] = {}
    for run, r in runs.items():
        for g, pool in (r.get("blind") or {}).items():
            distinct.setdefault(pool["pool"], []).append((run, g))
    per_test = sc.alpha / len(distinct) if distinct else sc.alpha
    rows, flagged_pools = [], []
    for fingerprint, where in distinct.items():
        run0, g0 = where[0]
        pool = runs[run0]["blind"][g0]
        flagged = pool["p_value"] <= per_test
        exact = min(pool["members"], pool["non_members"]) < params.min_per_side  # as blind_pool tested it
        power = detectable_auroc(pool["members"], pool["non_members"], per_test, exact, sc.power, sc.power_trials,
                                 sc.power_seed)
        verdicts, largest = {}, {}
        for run, g in where:  # each run's own attacks on the pool decide whether the guard could see their size
            top = _largest_model_auroc(runs[run], g)
            verdicts[run] = verdict(flagged, power["auroc"], top[0] if top else None)
            largest[run] = {"auroc": top[0], "attack": top[1]} if top else None
            runs[run]["blind"][g].update(flagged=flagged, verdict=verdicts[run], detectable_auroc=power["auroc"])
        flagged_pools += [f"{run}/{g}" for run, g in where if flagged]
        rows.append({"pool": fingerprint[:12], "group": g0, "runs": [run for run, _ in where],
                     **{k: pool[k] for k in ("members", "non_members", "auroc", "auroc_ci95", "p_value", "test")},
                     "flagged": flagged, "power": power, "largest_model_auroc": largest, "verdicts": verdicts})
    return {"alpha": sc.alpha, "family_size": len(distinct), "per_test_alpha": per_test, "correction": "bonferroni",
            "power_model": "binormal scores, the check's own test, seeded simulation",
            "flagged": flagged_pools, "pools": rows}
