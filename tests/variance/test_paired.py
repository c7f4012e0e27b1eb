"""The second pre-registered study (stages/variance/paired.py, ``variance.silent``): settings the accountant does not
see at one (q, T, sigma), each paired by seed with the base; Wilcoxon per setting, Holm over the settings. Synthetic
tables (labelled: values drawn here, no model trained)."""
import numpy as np
import pytest
from testkit.project import ROOT, params
from testkit.studies import study_table

from stages.shared.core.params import read_params
from stages.variance.grid import study_points
from stages.variance.paired import analyse_silent, holm, paired_tests, power
from stages.variance.params import SilentParams


def rows_of(values: dict[str, list[float]], seeds=range(3301, 3309)) -> list[dict]:
    """Synthetic models: values[config][i] is the model of config at the i-th seed."""
    return [{"config": c, "seed": s, "status": "completed", "v": float(v), "member_shift": float(v) / 100,
             "eps_lb_95": float(v) / 50} for c, vs in values.items() for s, v in zip(seeds, vs)]


def test_holm_is_statsmodels_step_down():
    out = holm({"a": 0.01, "b": 0.04, "c": 0.03}, 0.05)
    assert out["a"] == {"p_holm": pytest.approx(0.03), "rejected": True}
    assert out["c"]["p_holm"] == pytest.approx(0.06) and not out["c"]["rejected"]
    assert out["b"]["p_holm"] == pytest.approx(0.06) and not out["b"]["rejected"]


def test_a_setting_shifted_at_every_seed_is_rejected_and_a_null_one_is_not():
    rng = np.random.default_rng(0)  # synthetic
    base = rng.normal(84, 4, 8).round()
    values = {"base": base, "low": base - 10 + rng.normal(0, 2, 8).round(),
              "same": base + np.array([1, -2, 3, -1, 2, -3, 1, -1])}
    out = paired_tests(rows_of(values), "v", "base", ["low", "same"], 0.05)
    assert out["low"]["lower"] == 8 and out["low"]["p"] == pytest.approx(2 / 2 ** 8)  # exact: all 8 one way
    assert out["low"]["rejected"] and out["low"]["p_holm"] == pytest.approx(2 * out["low"]["p"])
    assert not out["same"]["rejected"] and out["same"]["p"] > 0.5
    assert out["low"]["mean_difference"] == pytest.approx(float(np.mean(values["low"] - base)))


def test_the_analysis_reports_the_primary_verdict_and_secondary_without_one():
    study = params(SilentParams, "variance.silent")
    base = np.arange(80, 88, dtype=float)
    out = analyse_silent(rows_of({"base": base, "lr_quarter": base - 9, "adamw": base}), study)
    assert out["primary"]["measure"] == "v" and out["primary"]["varies"] is True
    assert out["primary"]["tests"]["lr_quarter"]["rejected"] and "skipped" in out["primary"]["tests"]["adamw"]
    assert all("rejected" not in t for m in out["secondary"].values() for t in m["tests"].values())
    assert out["models"] == {"base": 8, "lr_quarter": 8, "adamw": 8}


def test_power_is_the_level_under_no_effect_and_grows_with_the_effect():
    draws = np.random.default_rng(1).normal(84, 3.8, 2000).round()  # synthetic: the ideal's spread at the study's q
    null = power(draws, 0.0, 8, 2, 0.05, 60, 0)  # 60 simulated studies each (about 7 s per 60)
    assert null <= 0.05  # Holm's first threshold 0.025, exact test: at most that
    assert power(draws, 8.0, 8, 2, 0.05, 60, 0) > power(draws, 4.0, 8, 2, 0.05, 60, 0) > null


def test_the_committed_second_study_is_registered_and_differs_only_where_the_accountant_is_silent():
    raw = read_params(ROOT / "params.yaml")
    study = params(SilentParams, "variance.silent")
    assert study.registered(raw) == []
    assert len(study.configs) >= 3 and len(study.seeds) >= 8
    assert len({(c.batch_size, c.steps) for c in study.configs.values()}) == 1  # one q, T and sigma
    pts = study_points(study, raw, "contrast")
    assert len(pts) == len(study.configs) * len(study.seeds)
    run = {p["config"]: p["runs"]["dp_eps8"] for p in pts if p["seed"] == study.seeds[0]}
    assert run["adamw"]["optimizer"] == "adamw" and run["base"]["optimizer"] == "sgd"
    assert {r["dp"]["epsilon"] for r in run.values()} == {8.0} and all(p["attacks"] == ["contrast"] for p in pts)
    with pytest.raises(Exception, match="variance.silent.configs"):
        params(SilentParams, "variance.silent", configs={"base": {"batch_size": 322, "steps": 5, "lr": 0.5,
                                                                  "optimizer": "sgd"},
                                                         "x": {"batch_size": 161, "steps": 5, "lr": 0.5,
                                                               "optimizer": "sgd"},
                                                         "y": {"batch_size": 322, "steps": 5, "lr": 0.1,
                                                               "optimizer": "sgd"}})


def test_the_stage_reads_the_table_and_analyses_only_the_complete_registered_design(tmp_path):
    from stages.variance.paired import silent_result

    study = params(SilentParams, "variance.silent")
    assert silent_result(study, tmp_path / "none.parquet") is None  # no table yet: nothing to say
    base = np.arange(80, 88, dtype=float)
    rows = [{**r, "point": f"p-{r['config']}-{r['seed']}", "status": "completed", "v": int(r["v"]), "r": 100,
             "m": 1000} for r in rows_of({"base": base, "lr_quarter": base - 9, "adamw": base - 1})]
    partial = silent_result(study, study_table(tmp_path, study, rows[:10]))
    assert partial["completed"] == 10 and partial["pending"] == 14 and partial["analysis"] is None
    full = silent_result(study, study_table(tmp_path, study, rows))
    assert full["analysis"]["primary"]["tests"]["lr_quarter"]["rejected"] and full["base"] == "base"
    assert full["plan"]["effect"] == study.effect  # the committed power statement travels with the result
    other = params(SilentParams, "variance.silent", alpha=0.01)
    with pytest.raises(Exception, match="written for another study design than variance.silent"):
        silent_result(other, study_table(tmp_path, study, rows))
