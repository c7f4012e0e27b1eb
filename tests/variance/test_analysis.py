"""The analysis of a sweep table on synthetic points whose coefficients are set here."""
import itertools

import numpy as np
import pytest

from stages.variance.analysis import analyse, regress, seed_vs_config, spearman

GRID = list(itertools.product([8, 16, 32], [10, 20, 40], [0.001, 0.002, 0.004]))


def synthetic(f, seeds=4, noise=0.05, eps=8.0, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    rows = []
    for (b, t, lr), s in itertools.product(GRID, range(seeds)):
        y = f(np.log(b), np.log(t), np.log(lr)) + rng.normal(0, noise)
        rows.append({"point": f"b{b}-t{t}-lr{lr}-s{s}", "status": "completed", "epsilon": eps, "batch_size": b,
                     "steps": t, "lr": lr, "seed": s, "score_mean": y, "control_mean": y - 1.0,
                     "utility": -(np.log(b * t * lr)) + rng.normal(0, .01),
                     "eps_hat": 2 * y + rng.normal(0, noise), "exposure": None, "profile": []})
    return rows


def within(fit, name, truth, k=2.5):
    c = fit["coefficients"][name]
    assert abs(c["coef"] - truth) <= k * c["se"], (name, c, truth)


def test_regression_on_individual_hyperparameters_recovers_the_coefficients():
    rows = synthetic(lambda lb, lt, ll: 1.0 + 0.13 * lb + 0.37 * lt + 0.51 * ll)
    fit = regress(rows, "score_mean", ("log_b", "log_T", "log_lr"))
    assert fit["n"] == 108 and fit["r2"] > 0.9
    for name, truth in (("log_b", 0.13), ("log_T", 0.37), ("log_lr", 0.51)):
        within(fit, name, truth)
        assert fit["coefficients"][name]["p"] < 1e-6


def test_regression_on_composites_recovers_the_coefficients():
    rows = synthetic(lambda lb, lt, ll: 0.22 * (lb + lt) + 0.53 * ll)  # Table 2(b): log C, log eta
    fit = regress(rows, "score_mean", ("log_C", "log_lr"))
    within(fit, "log_C", 0.22)
    within(fit, "log_lr", 0.53)
    upd = regress(rows, "score_mean", ("log_U", "log_lr"))  # log U = log C + log eta: eta's effect at fixed U
    within(upd, "log_U", 0.22)
    within(upd, "log_lr", 0.53 - 0.22)


def test_a_null_effect_is_not_significant_and_degenerate_designs_are_refused():
    rows = synthetic(lambda lb, lt, ll: 0.4 * lt, rng_seed=3)
    fit = regress(rows, "score_mean", ("log_b", "log_T", "log_lr"))
    within(fit, "log_b", 0.0)
    assert fit["coefficients"]["log_b"]["p"] > 0.01 and fit["coefficients"]["log_T"]["p"] < 1e-6
    one_lr = [r for r in rows if r["lr"] == 0.001]
    assert "rank-deficient" in regress(one_lr, "score_mean", ("log_b", "log_T", "log_lr"))["skipped"]
    flat = [{**r, "score_mean": 0.0} for r in rows]
    assert "nothing to explain" in regress(flat, "score_mean", ("log_b", "log_T", "log_lr"))["skipped"]


def test_seed_variance_vs_configuration_variance():
    rows = synthetic(lambda lb, lt, ll: 0.5 * ll, noise=0.05)
    v = seed_vs_config(rows, "score_mean")
    assert v["configurations"] == 27 and v["randomness_sd"] == pytest.approx(0.05, rel=0.25)
    assert v["hyperparameter_sd"] == pytest.approx(0.5 * np.std(np.log([0.001, 0.002, 0.004]) * np.ones((9, 3)),
                                                                ddof=1), rel=0.1)


def test_spearman_and_the_full_analysis():
    rows = synthetic(lambda lb, lt, ll: 0.13 * lb + 0.37 * lt + 0.51 * ll)
    s = spearman(rows, "eps_hat", "score_mean")
    assert s["n"] == 108 and s["rho"] > 0.9 and s["p"] < 1e-10
    rows[0] = {**rows[0], "status": "failed", "error": "boom", "score_mean": None}
    out = analyse(rows, "score_mean", min_points=6, control_alpha=0.05)
    assert out["completed"] == 107 and out["failed"] == [{"point": rows[0]["point"], "error": "boom"}]
    a = out["epsilons"]["8"]
    assert a["configurations"] == 27 and a["heuristics"]["individual"]["accuracy"] == 1.0
    assert a["selection"]["ours (Alg. 1)"]["absolute_risk"] <= a["selection"]["best utility"]["absolute_risk"]
    assert a["regressions"]["individual"]["r2"] > 0.9
    few = analyse(rows, "score_mean", min_points=200, control_alpha=0.05)["epsilons"]["8"]
    assert few["regressions"]["individual"]["skipped"] == "fewer than 200 points"


def test_control_check_counts_the_trained_arm_against_the_held_out_one():
    from stages.report.sections.variance import _control
    from stages.variance.analysis import control_check

    # the CPU default's shape: mostly ties at 0, one point above and one below its control
    pts = [{"score_mean": s, "control_mean": c} for s, c in [(0.0, 0.0)] * 6 + [(1 / 12, 0.0), (0.0, 1 / 12)]]
    c = control_check(pts, "score_mean")
    assert (c["n"], c["higher"], c["lower"], c["ties"]) == (8, 1, 1, 6)
    assert c["p"] == pytest.approx(0.75)  # P(X >= 1), X ~ Bin(2, 1/2)
    assert "noise-level" in _control({"control": {**c, "level": 0.05}}, "AIR")
    strong = {**c, "p": 0.03}  # below 0.05, above 0.05 / 2: one target epsilon says training, two do not
    assert "reflect training" in _control({"control": {**strong, "level": 0.05}}, "AIR")
    assert "noise-level" in _control({"control": {**strong, "level": 0.025}}, "AIR")
    assert control_check([{"score_mean": 0.1, "control_mean": None}], "score_mean")["skipped"]
    assert control_check([{"score_mean": 0.0, "control_mean": 0.0}], "score_mean")["p"] is None


@pytest.mark.parametrize("gap", [0.0, 0.5])
def test_no_regression_heuristic_or_selection_where_the_control_fails(gap):
    """The spread of a statistic whose control test fails is noise: no regression, heuristic accuracy or Algorithm-1
    pick is computed for it (gap 0: each trained arm ties its held-out control; 0.5: the control scores higher).
    The max statistic has no control: withheld too. The same rows with a passing control get all three."""
    rows = [{**r, "control_mean": r["score_mean"] + gap}
            for r in synthetic(lambda lb, lt, ll: 0.13 * lb + 0.37 * lt + 0.51 * ll)]
    a = analyse(rows, "score_mean", min_points=6, control_alpha=0.05)["epsilons"]["8"]
    assert a["withheld"] and a["heuristics"] == {} and a["selection"] == {} and a["picks"] == {}
    assert a["selected"] is None and all(fit["skipped"] == a["withheld"] for fit in a["regressions"].values())
    assert a["variance"]["hyperparameter_sd"] > 0 and a["spearman_eps_hat_score"]["rho"] is not None  # descriptive
    maxed = analyse([{**r, "score_max": r["score_mean"]} for r in rows], "score_max", 6, 0.05)["epsilons"]["8"]
    assert maxed["withheld"].startswith("no control test for this statistic")
    ok = analyse(synthetic(lambda lb, lt, ll: 0.5 * ll), "score_mean", 6, 0.05)["epsilons"]["8"]
    assert ok["withheld"] is None and ok["selected"] is not None and "r2" in ok["regressions"]["individual"]
    two = analyse(synthetic(lambda lb, lt, ll: 0.5 * ll) + synthetic(lambda lb, lt, ll: 0.5 * ll, eps=4.0),
                  "score_mean", 6, 0.05)["epsilons"]
    assert {e: a["control"]["level"] for e, a in two.items()} == {"4": 0.025, "8": 0.025}  # over the target epsilons
