"""Hyperparameter selection under empirical privacy variance (empirical-privacy-variance section 4.2-4.3, Alg. 1).

Three pairwise heuristics, each predicting which of two configurations (b, T, eta) calibrated to the same
(epsilon, delta) has the better (lower) empirical privacy score:

1. individual: T1 <= T2, b1 <= b2 and eta1 <= eta2 with at least one strict;
2. compute: C1 = C2 (C = b T), eta1 = eta2 and b1 > b2;
3. updates: U1 = U2 (U = C eta) and eta1 < eta2.

Equality of products is decided on a relative tolerance (``REL_TOL``) so that, e.g., 16 * 20 * 0.003 and
32 * 10 * 0.003 fall into one group although their floating-point products differ in the last bit.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import numpy as np

REL_TOL = 1e-9


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL)


def _cfg(p: Mapping) -> tuple[float, float, float]:
    return float(p["batch_size"]), float(p["steps"]), float(p["lr"])


def compute(p: Mapping) -> float:
    b, t, _ = _cfg(p)
    return b * t


def updates(p: Mapping) -> float:
    b, t, lr = _cfg(p)
    return b * t * lr


def groups(values: Sequence[float]) -> list[list[int]]:
    """Indices grouped by equal value within REL_TOL (values sorted, neighbours chained)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out: list[list[int]] = []
    for i in order:
        if out and _close(values[out[-1][0]], values[i]):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def dominates(p: Mapping, q: Mapping) -> bool:
    """Individual-hyperparameter heuristic: p is expected to be more private than q."""
    a, b = _cfg(p), _cfg(q)
    le = all(x <= y or _close(x, y) for x, y in zip(a, b))
    return le and any(x < y and not _close(x, y) for x, y in zip(a, b))


def compute_better(p: Mapping, q: Mapping) -> bool:
    """Compute heuristic: same C and eta, larger b is expected to be more private."""
    return (_close(compute(p), compute(q)) and _close(float(p["lr"]), float(q["lr"]))
            and float(p["batch_size"]) > float(q["batch_size"]) and not _close(float(p["batch_size"]),
                                                                                float(q["batch_size"])))


def updates_better(p: Mapping, q: Mapping) -> bool:
    """Updates heuristic: same U, smaller eta is expected to be more private."""
    return (_close(updates(p), updates(q)) and float(p["lr"]) < float(q["lr"])
            and not _close(float(p["lr"]), float(q["lr"])))


HEURISTICS: dict[str, Callable[[Mapping, Mapping], bool]] = {
    "individual": dominates, "compute": compute_better, "updates": updates_better}


def _keep_extreme(points: Sequence[Mapping], idx: list[int], key: Callable[[Mapping], float],
                  lowest: bool) -> list[int]:
    vals = [key(points[i]) for i in idx]
    best = min(vals) if lowest else max(vals)
    return [i for i, v in zip(idx, vals) if _close(v, best)]


def select_configuration(points: Sequence[Mapping]) -> int:
    """Algorithm 1: the index of the configuration chosen from a pool calibrated to one (epsilon, delta).

    ``points``: mappings with ``batch_size``, ``steps``, ``lr`` and ``utility`` (higher is better).
    Step 1 keeps, per group of equal U = b T eta, the points with the smallest eta; step 2 keeps, per group of
    equal (U, C = b T), those with the largest b; step 3 drops every point another remaining point dominates
    (b, T, eta all <=, one strictly); the final step returns the remaining point with the worst utility
    (ties: the lowest index)."""
    if not points:
        raise ValueError("select_configuration: empty pool")
    idx = list(range(len(points)))
    kept: list[int] = []
    for g in groups([updates(points[i]) for i in idx]):
        kept += _keep_extreme(points, [idx[j] for j in g], lambda p: float(p["lr"]), lowest=True)
    step2: list[int] = []
    for g in groups([updates(points[i]) for i in kept]):
        sub = [kept[j] for j in g]
        for h in groups([compute(points[i]) for i in sub]):
            step2 += _keep_extreme(points, [sub[j] for j in h], lambda p: float(p["batch_size"]), lowest=False)
    step3 = [i for i in step2 if not any(dominates(points[j], points[i]) for j in step2 if j != i)]
    return min(sorted(step3), key=lambda i: float(points[i]["utility"]))


def best_utility(points: Sequence[Mapping]) -> int:
    """The usual practice: the configuration with the best utility (ties: the lowest index)."""
    return max(range(len(points)), key=lambda i: (float(points[i]["utility"]), -i))


def worst_utility(points: Sequence[Mapping]) -> int:
    """The standalone worst-utility heuristic (the common belief in a utility-privacy trade-off)."""
    return min(range(len(points)), key=lambda i: (float(points[i]["utility"]), i))


METHODS: dict[str, Callable[[Sequence[Mapping]], int]] = {
    "ours (Alg. 1)": select_configuration, "best utility": best_utility, "worst utility": worst_utility}


def heuristic_accuracy(points: Sequence[Mapping], score: str = "score") -> dict[str, dict]:
    """Per heuristic: the pairs satisfying its condition, the share where the predicted configuration has the
    strictly lower score (a tie counts as wrong, as in the seed's App. D.1), and random guessing's expected
    accuracy on the same pairs (1/2 of the pairs whose scores differ)."""
    out = {}
    for name, better in HEURISTICS.items():
        pairs = [(i, j) for i in range(len(points)) for j in range(len(points)) if i != j
                 and better(points[i], points[j])]
        right = sum(float(points[i][score]) < float(points[j][score]) for i, j in pairs)
        differ = sum(float(points[i][score]) != float(points[j][score]) for i, j in pairs)
        out[name] = {"pairs": len(pairs), "correct": int(right),
                     "accuracy": right / len(pairs) if pairs else None,
                     "random_guess": 0.5 * differ / len(pairs) if pairs else None}
    return out


def selection_risk(points: Sequence[Mapping], score: str = "score") -> dict[str, dict]:
    """Section 4.3: slide a utility threshold u over every point's utility; on the sub-pool of points with
    utility >= u each method selects one, and its privacy risk against the oracle (the lowest score in the
    sub-pool) is y_sel - y_oracle (absolute) and (y_sel - y_oracle) / y_oracle (relative; thresholds whose
    oracle scores 0 are skipped, App. D.3). Returned: the mean of each over the thresholds."""
    utilities = sorted({float(p["utility"]) for p in points}, reverse=True)
    acc = {m: {"absolute": [], "relative": []} for m in METHODS}
    for u in utilities:
        pool = [p for p in points if float(p["utility"]) >= u]
        ys = [float(p[score]) for p in pool]
        oracle = min(ys)
        for m, pick in METHODS.items():
            y = ys[pick(pool)]
            acc[m]["absolute"].append(y - oracle)
            if oracle > 0:
                acc[m]["relative"].append((y - oracle) / oracle)
    return {m: {"thresholds": len(utilities),
                "absolute_risk": float(np.mean(v["absolute"])) if v["absolute"] else None,
                "relative_risk": float(np.mean(v["relative"])) if v["relative"] else None,
                "relative_thresholds": len(v["relative"])} for m, v in acc.items()}
