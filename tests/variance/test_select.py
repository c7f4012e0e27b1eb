"""Algorithm 1 and the pairwise heuristics of empirical-privacy-variance section 4.2-4.3."""
import itertools

import numpy as np
import pytest

from stages.variance.select import (
    best_utility,
    dominates,
    groups,
    heuristic_accuracy,
    select_configuration,
    selection_risk,
    worst_utility,
)


def pt(b, t, lr, utility, score=0.0):
    return {"batch_size": b, "steps": t, "lr": lr, "utility": utility, "score": score}


# A, B, C share U = 7 (in floating point A's product is 7.000000000000001, B's 7.0)
HAND_POOL = [
    pt(5, 20, 0.07, 0.95),   # A: U=7, C=100 -> survives step 1 (min lr at U=7), wins step 2 (max b at C=100)
    pt(1, 10, 0.7, 0.20),    # B: U=7, C=10  -> dropped in step 1 (larger lr at the same U): the worst utility overall
    pt(1, 100, 0.07, 0.80),  # C: U=7, C=100 -> dropped in step 2 (smaller b than A at the same U and C)
    pt(2, 20, 0.07, 0.60),   # D: U=2.8      -> survives; dominates A in step 3 (b 2 < 5, same T and lr)
    pt(10, 5, 0.05, 0.65),   # E: U=2.5      -> survives (neither of D and E dominates the other)
]


def test_algorithm_1_on_a_hand_made_pool():
    assert 5 * 20 * 0.07 != 1 * 10 * 0.7  # the floating-point products differ; the groups must not
    assert select_configuration(HAND_POOL) == 3  # D: the worse utility of the survivors D and E
    assert best_utility(HAND_POOL) == 0 and worst_utility(HAND_POOL) == 1


def test_step_by_step_facts_of_the_hand_pool():
    us = [p["batch_size"] * p["steps"] * p["lr"] for p in HAND_POOL]
    assert sorted(len(g) for g in groups(us)) == [1, 1, 3]
    assert dominates(HAND_POOL[3], HAND_POOL[0]) and not dominates(HAND_POOL[0], HAND_POOL[3])
    assert not dominates(HAND_POOL[3], HAND_POOL[4]) and not dominates(HAND_POOL[4], HAND_POOL[3])
    assert not dominates(HAND_POOL[3], HAND_POOL[3])  # identical points do not dominate each other
    # dropping the two survivors leaves A: C lost step 2 to it and B lost step 1
    assert select_configuration([HAND_POOL[i] for i in (0, 1, 2)]) == 0
    with pytest.raises(ValueError):
        select_configuration([])


def _cube(f):
    return [pt(b, t, lr, utility=-float(np.log(b * t * lr)), score=f(b, t, lr))
            for b, t, lr in itertools.product([8, 16, 32], [10, 20, 40], [0.001, 0.002, 0.004])]


def test_heuristics_are_right_when_privacy_follows_the_seeds_coefficients():
    """y = 0.13 log b + 0.37 log T + 0.51 log eta (Table 2, Enron): the individual and compute heuristics are right
    on every pair; at equal U, y = 0.51 log U - 0.38 log b - 0.14 log T, so the smaller eta (larger C) is right
    unless C grows through T while b shrinks (e.g. (32, 10) vs (16, 40)): right on most pairs, not all."""
    acc = heuristic_accuracy(_cube(lambda b, t, lr: 0.13 * np.log(b) + 0.37 * np.log(t) + 0.51 * np.log(lr)))
    for name in ("individual", "compute"):
        assert acc[name]["pairs"] > 0 and acc[name]["accuracy"] == 1.0 and acc[name]["random_guess"] == 0.5, name
    assert acc["updates"]["pairs"] == 42 and acc["updates"]["correct"] == 38
    # compute pairs: per eta (3), the anti-diagonals of the 3x3 (b, T) plane hold 1 + 3 + 1 ordered pairs
    assert acc["compute"]["pairs"] == 3 * 5


def test_heuristics_fail_when_privacy_runs_the_other_way_and_ties_count_as_wrong():
    acc = heuristic_accuracy(_cube(lambda b, t, lr: -(np.log(b) + np.log(t) + np.log(lr))))
    assert acc["individual"]["accuracy"] == 0.0
    flat = heuristic_accuracy(_cube(lambda b, t, lr: 0.0))  # VMR = 0 everywhere (seed App. D.1)
    assert flat["individual"]["accuracy"] == 0.0 and flat["individual"]["random_guess"] == 0.0


def test_selection_risk_against_the_oracle():
    # utility falls as score falls: best utility is the worst privacy; Alg. 1 finds the oracle at every threshold
    pool = [pt(8, 10, 0.001, 0.5, 1.0), pt(16, 10, 0.001, 0.7, 2.0), pt(16, 20, 0.001, 0.9, 4.0)]
    risk = selection_risk(pool)
    assert risk["ours (Alg. 1)"]["absolute_risk"] == 0.0 and risk["ours (Alg. 1)"]["relative_risk"] == 0.0
    # best utility: thresholds 0.9 (only the last point: risk 0), 0.7 (picks 4 vs 2), 0.5 (4 vs 1)
    assert risk["best utility"]["absolute_risk"] == pytest.approx((0 + 2 + 3) / 3)
    assert risk["best utility"]["relative_risk"] == pytest.approx((0 + 1 + 3) / 3)
    assert risk["worst utility"]["absolute_risk"] == 0.0
    zero = selection_risk([pt(8, 10, 0.001, 0.5, 0.0), pt(16, 10, 0.001, 0.7, 1.0)])
    assert zero["best utility"]["relative_thresholds"] == 1  # the threshold whose oracle scores 0 is skipped
