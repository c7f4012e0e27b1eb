"""The pooled test over a recipe's independent runs, efficiency intervals (stages/audit/pooled.py)."""
from dataclasses import replace

import numpy as np
import pytest
from testkit.project import params

from stages.audit.params import AuditParams
from stages.audit.pooled import design_look, median_interval, pooled_test
from stages.finetune.schema import PrivacyRecord
from stages.shared.bounds.one_run import epsilon_lower_bound, guesses

PRIVACY = PrivacyRecord(dp=True, sample_rate=0.23, steps=10, noise_multiplier=0.8154, epsilon_spent=8.0, delta=1e-5,
                        optimizer="DP-adamw", accountant="prv", secure_rng=False)


def _member(run, seed, shift, n=400):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.5
    return {"run": run, "seeds": [seed], "privacy": PRIVACY, "scores": rng.normal(size=n) + shift * y,
            "labels": y}


def _params():
    return params(AuditParams, "audit", ceiling={"trials": 200, "planned": {}})


def test_the_pooled_bound_is_the_one_run_bound_on_the_concatenated_counts():
    members = [_member("a", 7, 1.0), _member("a_r2", 8, 1.2), _member("a_r3", 9, 0.8)]
    out = pooled_test(members, (20, 0), 1e-5, _params(), "confirmation")
    counts = [guesses(m["scores"], m["labels"], 20, 0) for m in members]
    m, r, v = (sum(c[i] for c in counts) for i in range(3))
    assert (out["m"], out["r"], out["v"]) == (m, r, v) == (1200, 60, out["v"])
    assert out["eps_lb_95"] == epsilon_lower_bound(m, r, v, 1e-5, 0.95)
    assert [s["v"] for s in out["single_runs"]] == [c[2] for c in counts]
    assert out["single_runs"][1]["eps_lb_95"] == epsilon_lower_bound(*counts[1], 1e-5, 0.95)
    assert out["seed_status"] == "confirmation" and out["seeds"] == [7, 8, 9]
    assert {s["seed_status"] for s in out["single_runs"]} == {"confirmation"}  # the set's status, as the caller gave
    assert 0 <= out["ideal_percentile"] <= 100 and out["ideal_eps_lb_95_p10"] <= out["ideal_eps_lb_95_median"]
    assert out["efficiency"]["n"] == 3 and out["efficiency"]["coverage"] == pytest.approx(0.75)
    assert out["eps_lb_95"] < out["accountant_epsilon"]


def test_replicas_must_share_the_recipes_privacy():
    other = _member("a_r2", 8, 1.0)
    other["privacy"] = replace(PRIVACY, noise_multiplier=0.9)
    with pytest.raises(ValueError, match="noise_multiplier"):
        pooled_test([_member("a", 7, 1.0), other], (20, 0), 1e-5, _params(), "confirmation")


def test_the_median_interval_states_its_coverage():
    three = median_interval([10.0, 50.0, 30.0])
    assert (three["median"], three["low"], three["high"]) == (30.0, 10.0, 50.0)
    assert three["coverage"] == pytest.approx(0.75)  # 1 - 2 / 2^3: three runs cannot give 95%
    ten = median_interval(list(range(10)))
    assert ten["coverage"] >= 0.95 and (ten["low"], ten["high"]) == (1.0, 8.0)  # x_(2), x_(9): 97.9%


def test_the_design_look_pools_every_subset_and_its_proxy_is_a_seeded_subset():
    runs = [_member(f"d{s}", s, 1.5) for s in range(4)]
    per_run = [(m["scores"], m["labels"], np.array([f"c{i:04d}" for i in range(400)])) for m in runs]
    look = design_look(per_run, [10, 40], 1e-5, pool_size=3)
    assert look["subsets"] == 4 and look["m"] == [400] * 4
    counts = [[guesses(m["scores"], m["labels"], k, 0) for k in (10, 40)] for m in runs]
    assert look["v"] == [{"10": c[0][2], "40": c[1][2]} for c in counts]
    pooled = sorted(epsilon_lower_bound(1200, 120, sum(counts[i][1][2] for i in sub), 1e-5, 0.95)
                    for sub in ((0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)))
    assert look["median_pooled_eps_lb"]["40"] == pytest.approx(np.median(pooled))
    assert look["best_k"] in (10, 40) and look["best_median"] == max(look["median_pooled_eps_lb"].values())
    # the proxy: the same seeded subset of every run, whatever order the ids arrive in
    half = design_look(per_run, [10], 1e-5, pool_size=3, subsample=200)
    shuffled = [(s[::-1], y[::-1], i[::-1]) for s, y, i in per_run]
    assert design_look(shuffled, [10], 1e-5, pool_size=3, subsample=200) == half and half["m"] == [200] * 4
