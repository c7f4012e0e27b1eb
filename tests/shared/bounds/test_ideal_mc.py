"""The ideal audit's Monte Carlo error (stages/shared/bounds/ceiling.py): every simulated median and percentile carries
one,
and the per-count bound cache computes each distinct (m, r, v) once without changing any value."""
import math

import numpy as np
import pytest
from testkit.project import params

from stages.audit.params import AuditParams
from stages.audit.pooled import pooled_test
from stages.finetune.schema import PrivacyRecord
from stages.shared.bounds import one_run
from stages.shared.bounds.ceiling import ideal_audit, ideal_counts, percentile_mc, quantile_mc, trial_bounds

PRIVACY = PrivacyRecord(dp=True, sample_rate=0.23, steps=10, noise_multiplier=0.8154, epsilon_spent=8.0, delta=1e-5,
                        optimizer="DP-sgd", accountant="prv", secure_rng=False)


def test_the_quantile_interval_covers_and_its_error_shrinks_like_one_over_root_n():
    rng = np.random.default_rng(0)
    covered, ses = 0, {}
    for n in (400, 6400):
        for rep in range(200 if n == 400 else 1):
            mc = quantile_mc(rng.normal(size=n), 50)
            covered += n == 400 and mc["low"] <= 0.0 <= mc["high"]
            ses.setdefault(n, mc["se"])
    assert 0.9 <= covered / 200 <= 0.99  # ~95 % distribution-free coverage of the true median
    # se of a normal median: sqrt(pi / 2) / sqrt(n); 16x the trials, a quarter of the error
    assert ses[400] == pytest.approx(math.sqrt(math.pi / 2 / 400), rel=0.3)
    assert ses[6400] == pytest.approx(ses[400] / 4, rel=0.35)
    assert quantile_mc([2.0] * 50, 50) == {"value": 2.0, "low": 2.0, "high": 2.0, "se": 0.0}  # one value: no error


def test_a_percentile_carries_its_binomial_error():
    sample = np.array([1] * 20 + [2] * 10 + [3] * 70)
    pct, se = percentile_mc(2, sample)
    assert pct == pytest.approx(25.0)  # 20 below, 10 tied (half each)
    z = 100 * ((sample < 2) + 0.5 * (sample == 2))
    assert se == pytest.approx(np.std(z, ddof=1) / 10)
    big = np.random.default_rng(1).random(20_000)
    assert percentile_mc(0.11, big)[1] == pytest.approx(100 * math.sqrt(0.11 * 0.89 / 20_000), rel=0.05)


def test_trial_bounds_compute_each_distinct_count_once(monkeypatch):
    counts = ideal_counts(0.23, 10, 0.8, m=500, k_pos=50, k_neg=0, trials=300, seed=2)
    calls = []
    real = one_run.epsilon_lower_bound

    def counting(*a):
        calls.append(a)
        return real(*a)

    monkeypatch.setattr("stages.shared.bounds.ceiling.epsilon_lower_bound", counting)
    got = trial_bounds(counts, 1e-5, 0.95)
    assert len(calls) == len(set(counts)) < len(counts)
    assert got.tolist() == [real(*c, 1e-5, 0.95) for c in counts]


def test_every_ideal_median_and_percentile_has_its_monte_carlo_error():
    out = ideal_audit(0.23, 10, 0.8, m=1000, k_pos=100, k_neg=0, delta=1e-5, confidences=(0.95,), trials=400, seed=3)
    for name in ("eps_lb", "gdp_eps_lb"):
        for q in ("median", "p10", "p90"):
            assert out[f"ideal_{name}_95_{q}_mcse"] >= 0
    counts = ideal_counts(0.23, 10, 0.8, m=1000, k_pos=100, k_neg=0, trials=400, seed=3)
    again = ideal_audit(0.23, 10, 0.8, m=1000, k_pos=100, k_neg=0, delta=1e-5, confidences=(0.95,), trials=400,
                        seed=3, counts=counts)
    assert again == out  # the caller's draws are the same trials

    rng = np.random.default_rng(0)
    members = []
    for run, seed in (("a", 7), ("a_r2", 8), ("a_r3", 9)):
        y = rng.random(400) < 0.5
        members.append({"run": run, "seeds": [seed], "privacy": PRIVACY, "labels": y,
                        "scores": rng.normal(size=400) + 1.0 * y})
    pooled = pooled_test(members, (20, 0), 1e-5, params(AuditParams, "audit", ceiling={"trials": 200, "planned": {}}),
                         "confirmation")
    assert pooled["ideal_eps_lb_95_median_mcse"] >= 0 and pooled["ideal_gdp_eps_lb_95_median_mcse"] >= 0
    assert 0 < pooled["ideal_percentile_mcse"] < 10 or pooled["ideal_percentile"] in (0.0, 100.0)
    assert all("ideal_percentile_mcse" in s for s in pooled["single_runs"])
    assert "efficiency_95" not in pooled and all("efficiency_95" not in s for s in pooled["single_runs"])
