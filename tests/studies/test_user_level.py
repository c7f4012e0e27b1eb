"""The user-level plan's ideals (stages/studies/user_level.py): under example-level DP a canary user's k rows add k
times the inclusions against the same noise, under user-level DP one unit's; the published point (epsilon 2, q 0.23,
T 10, 1000 canary users, 100 "in" guesses: about 2.49 at k = 4, the 3.47 cap at k = 8, about 0.4 user-level)."""
import pytest

from stages.audit.ceiling import ideal_counts
from stages.core.errors import ConfigError
from stages.core.params import build
from stages.studies.user_level import UserLevelPlanParams, plan_ideals, user_ideal


def test_one_row_per_user_is_the_single_canary_ideal_under_either_unit():
    a = ideal_counts(0.23, 10, 1.9, m=200, k_pos=20, k_neg=0, trials=50, seed=3)
    assert ideal_counts(0.23, 10, 1.9, m=200, k_pos=20, k_neg=0, trials=50, seed=3, rows=1) == a  # unchanged draws
    ex = user_ideal(0.23, 10, 1.9, unit="example", rows=1, m=200, k_pos=20, delta=1e-5, confidence=0.95, trials=200,
                    seed=1)
    us = user_ideal(0.23, 10, 1.9, unit="user", rows=1, m=200, k_pos=20, delta=1e-5, confidence=0.95, trials=200,
                    seed=1)
    assert ex["ideal_eps_lb_95_median"] == us["ideal_eps_lb_95_median"]
    with pytest.raises(ValueError, match="unit 'group'"):
        user_ideal(0.23, 10, 1.9, unit="group", rows=1, m=200, k_pos=20, delta=1e-5, confidence=0.95, trials=10,
                   seed=1)


def test_the_plan_reproduces_the_published_ordering():
    plan = plan_ideals(epsilon=2.0, delta=1e-5, sample_rate=0.23, steps=10, rows=[4, 8], m=1000, k_pos=100,
                       confidence=0.95, trials=600, seed=0)
    med = {(r["unit"], r["rows"]): r["ideal_eps_lb_95_median"] for r in plan["rows"]}
    assert med[("example", 4)] == pytest.approx(2.49, abs=0.15)
    assert med[("example", 8)] == pytest.approx(plan["cap_eps_lb"]) == pytest.approx(3.47, abs=0.01)
    assert med[("user", 4)] < 0.6 and med[("user", 8)] < 0.6  # a user's rows clipped as one unit: a single row's
    assert med[("example", 4)] > plan["epsilon"] > med[("user", 4)]  # the ideal exceeds epsilon only per example


def test_the_design_is_validated_naming_the_key():
    good = dict(epsilon=2.0, delta=1e-5, sample_rate=0.23, steps=10, accountant="prv", rows=[1, 4], m=1000, k_pos=100,
                confidence=0.95, trials=1000, seed=0, confirmation_seeds=[1], prediction="p", out="x.json")
    assert build(UserLevelPlanParams, good, "user_level").rows == (1, 4)
    with pytest.raises(ConfigError, match="user_level.m: must be >= 1000"):
        build(UserLevelPlanParams, {**good, "m": 16, "k_pos": 10}, "user_level")
