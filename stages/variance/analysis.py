"""Empirical privacy variance over a sweep table (empirical-privacy-variance sections 3-5, App. C.3, D).

Inputs are the completed points of one sweep: per point its (epsilon, b, T, eta, seed), utility and privacy
scores. Everything here is computed per target epsilon (points calibrated to different epsilons are never
pooled), on the configuration means over seeds where the seed does so (jitter plot, heuristics, selection).
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np

from .select import METHODS, heuristic_accuracy, selection_risk

#: regressions of section 4.1 (Table 2): response = the privacy score; covariates in log space
MODELS: dict[str, tuple[str, ...]] = {
    "individual": ("log_b", "log_T", "log_lr"),
    "compute": ("log_C", "log_lr"),
    "updates": ("log_U", "log_lr"),
}


def by_epsilon(points: Sequence[Mapping]) -> dict[float, list[Mapping]]:
    out: dict[float, list[Mapping]] = defaultdict(list)
    for p in points:
        out[float(p["epsilon"])].append(p)
    return dict(sorted(out.items()))


def config_key(p: Mapping) -> tuple[float, float, float]:
    return float(p["batch_size"]), float(p["steps"]), float(p["lr"])


def config_means(points: Sequence[Mapping], fields: Sequence[str]) -> list[dict]:
    """One row per configuration: its hyperparameters, the number of seeds and the mean of each field."""
    groups: dict[tuple, list[Mapping]] = defaultdict(list)
    for p in points:
        groups[config_key(p)].append(p)
    rows = []
    for (b, t, lr), ps in sorted(groups.items()):
        row = {"batch_size": int(b), "steps": int(t), "lr": lr, "seeds": len(ps)}
        for f in fields:
            vals = [float(p[f]) for p in ps if p.get(f) is not None and math.isfinite(float(p[f]))]
            row[f] = float(np.mean(vals)) if vals else None
            row[f + "_sd"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else None
        rows.append(row)
    return rows


def seed_vs_config(points: Sequence[Mapping], score: str) -> dict:
    """App. C.3 / Table 8: the randomness SD (mean over configurations of the SD across seeds) and the
    hyperparameter SD (the SD across configurations of the seed-mean)."""
    rows = config_means(points, [score])
    sds = [r[score + "_sd"] for r in rows if r[score + "_sd"] is not None]
    means = [r[score] for r in rows if r[score] is not None]
    return {"configurations": len(rows), "points": len(points),
            "randomness_sd": float(np.mean(sds)) if sds else None,
            "hyperparameter_sd": float(np.std(means, ddof=1)) if len(means) > 1 else None}


def design(points: Sequence[Mapping]) -> dict[str, np.ndarray]:
    b = np.array([float(p["batch_size"]) for p in points])
    t = np.array([float(p["steps"]) for p in points])
    lr = np.array([float(p["lr"]) for p in points])
    return {"log_b": np.log(b), "log_T": np.log(t), "log_lr": np.log(lr), "log_C": np.log(b * t),
            "log_U": np.log(b * t * lr)}


def regress(points: Sequence[Mapping], score: str, covariates: Sequence[str]) -> dict:
    """OLS of the score on the covariates with an intercept (statsmodels): coefficient, standard error,
    p-value per covariate, R^2 and n. Refuses (with a reason) when the design cannot identify the model."""
    import statsmodels.api as sm

    x = design(points)
    y = np.array([float(p[score]) for p in points])
    X = sm.add_constant(np.column_stack([x[c] for c in covariates]), has_constant="add")
    n, k = X.shape
    if n <= k:
        return {"n": n, "skipped": f"{n} points for {k} coefficients"}
    if np.linalg.matrix_rank(X) < k:
        return {"n": n, "skipped": "the grid does not vary every covariate independently (rank-deficient design)"}
    if float(np.ptp(y)) == 0.0:
        return {"n": n, "skipped": f"every point scores {y[0]:g}: nothing to explain"}
    fit = sm.OLS(y, X).fit()
    names = ("const", *covariates)
    return {"n": n, "r2": float(fit.rsquared), "r2_adj": float(fit.rsquared_adj),
            "coefficients": {nm: {"coef": float(c), "se": float(s), "p": float(pv)}
                             for nm, c, s, pv in zip(names, fit.params, fit.bse, fit.pvalues)}}


def finite_pairs(xs: Sequence, ys: Sequence) -> list[tuple[float, float]]:
    """The (x, y) pairs where both values are present and finite."""
    return [(float(x), float(y)) for x, y in zip(xs, ys) if x is not None and y is not None
            and math.isfinite(float(x)) and math.isfinite(float(y))]


def spearman_of(xs: Sequence, ys: Sequence) -> dict:
    """Spearman's rank correlation of paired values (scipy) with its p-value, over the finite pairs; skipped with
    fewer than 3 pairs or a constant variable."""
    from scipy.stats import spearmanr

    pairs = finite_pairs(xs, ys)
    if len(pairs) < 3 or len({x for x, _ in pairs}) < 2 or len({y for _, y in pairs}) < 2:
        return {"n": len(pairs), "rho": None, "p": None,
                "skipped": "fewer than 3 points or a constant variable"}
    res = spearmanr([x for x, _ in pairs], [y for _, y in pairs])
    return {"n": len(pairs), "rho": float(res.statistic), "p": float(res.pvalue)}


def spearman(points: Sequence[Mapping], a: str, b: str) -> dict:
    """Section 5.1: Spearman's rank correlation of two per-point quantities, with its p-value."""
    return spearman_of([p.get(a) for p in points], [p.get(b) for p in points])


def control_check(points: Sequence[Mapping], score: str, control: str = "control_mean") -> dict:
    """Is the score a training effect? Per point, the trained secrets' mean score against the randomised held-out
    secrets' (same model, same base correction): how often it is higher / lower, and the one-sided sign test of
    "higher more often than not" over the points where the two differ (scipy's exact binomial test)."""
    from scipy.stats import binomtest

    pairs = [(float(p[score]), float(p[control])) for p in points
             if p.get(score) is not None and p.get(control) is not None]
    if not pairs:
        return {"n": 0, "skipped": "no randomised held-out control"}
    higher = sum(a > b for a, b in pairs)
    lower = sum(a < b for a, b in pairs)
    return {"n": len(pairs), "score": float(np.mean([a for a, _ in pairs])),
            "control": float(np.mean([b for _, b in pairs])), "higher": higher, "lower": lower,
            "ties": len(pairs) - higher - lower,
            "p": float(binomtest(higher, higher + lower, 0.5, alternative="greater").pvalue) if higher + lower
                 else None}


def profiles(points: Sequence[Mapping]) -> list[dict]:
    """Section 5.2: the accountant's privacy profile eps(delta) per (b, T) (the learning rate and the seed do not
    enter the accounting: sigma, q and T fix it), with the calibrated sigma and q."""
    seen = {}
    for p in points:
        key = (int(p["batch_size"]), int(p["steps"]))
        if p.get("profile") and key not in seen:
            seen[key] = {"batch_size": key[0], "steps": key[1], "sigma": p.get("sigma"),
                         "sample_rate": p.get("sample_rate"),
                                   "profile": [{"delta": float(d["delta"]), "epsilon": float(d["epsilon"])}
                                               for d in p["profile"]]}
    return [seen[k] for k in sorted(seen)]


def withheld(control: Mapping, level: float) -> str | None:
    """Why the score's regressions, heuristic accuracies and Algorithm-1 selection are not computed (None: they
    are). They explain or rank a spread; unless the control shows the score is a training effect (the sign test
    below ``level``), the spread is noise and fitting or ranking it would print findings that are not there."""
    if control.get("skipped"):
        return f"no control test for this statistic ({control['skipped']})"
    if control.get("p") is None:
        return "the control test has no point where the trained and held-out arms differ"
    if control["p"] >= level:
        return (f"the control test does not show a training effect (sign test p = {control['p']:.3g}, "
                f"level {level:.3g})")
    return None


def analyse_epsilon(points: Sequence[Mapping], score: str, min_points: int, level: float) -> dict:
    """Every analysis of section 3-5 for the points calibrated to one epsilon. ``level``: the control test's
    (pre-registered ``variance.control_alpha``, over the target epsilons); regressions, heuristics and the selection
    are computed only where it passes (``withheld``)."""
    means = config_means(points, [score, "utility", "eps_hat", "exposure"])
    pool = [m for m in means if m[score] is not None and m["utility"] is not None]
    deltas = sorted({float(p["delta"]) for p in points if p.get("delta") is not None})
    out = {"points": len(points), "configurations": len(means), "config_means": means,
           "deltas": deltas,  # the delta(s) "epsilon" holds at here
           "variance": seed_vs_config(points, score), "profiles": profiles(points)}
    out["control"] = (control_check(points, score) if score == "score_mean" else
                      {"n": 0, "skipped": "the control is the held-out secrets' mean: compared with the mean only"})
    out["control"]["level"] = level
    why = out["withheld"] = withheld(out["control"], level)
    if why:
        out["regressions"] = {name: {"n": len(points), "skipped": why} for name in MODELS}
    elif len(points) >= min_points:
        out["regressions"] = {name: regress(points, score, cov) for name, cov in MODELS.items()}
    else:
        out["regressions"] = {name: {"n": len(points), "skipped": f"fewer than {min_points} points"} for name in MODELS}
    hp = [] if why else [{**m, "score": m[score]} for m in pool]
    out["heuristics"] = heuristic_accuracy(hp) if hp else {}
    out["selection"] = selection_risk(hp) if hp else {}
    out["picks"] = {name: config_key(hp[pick(hp)]) for name, pick in METHODS.items()} if hp else {}  # whole pool
    out["selected"] = out["picks"].get("ours (Alg. 1)")
    out["spearman_eps_hat_score"] = spearman(points, "eps_hat", score)
    out["spearman_eps_hat_utility"] = spearman(points, "eps_hat", "utility")
    out["spearman_score_utility"] = spearman(points, score, "utility")
    return out


def analyse(points: Sequence[Mapping], score: str, min_points: int, control_alpha: float) -> dict:
    """Every epsilon's analysis; the control test of each at ``control_alpha`` / the number of target epsilons."""
    done = [p for p in points if p["status"] == "completed" and p.get(score) is not None
            and math.isfinite(float(p[score]))]
    groups = by_epsilon(done)
    level = control_alpha / max(len(groups), 1)
    return {"score": score, "points": len(points), "completed": len(done),
            "failed": [{"point": p["point"], "error": p.get("error")} for p in points if p["status"] != "completed"],
            "epsilons": {f"{eps:g}": analyse_epsilon(ps, score, min_points, level) for eps, ps in groups.items()}}
