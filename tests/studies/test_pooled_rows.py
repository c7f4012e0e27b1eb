"""pooled.json rows and bars (stages/studies/study.py): a row's phase comes from its seeds' status in params now, each
row names its stream derivation, one row per (recipe, seeds, streams), and the summary gives one bar per design."""
import json

from stages.audit.params import SeedRegistry
from stages.core.params import load
from stages.core.seeds import DERIVATION
from stages.studies.study import COUPLED_STREAMS, pooled_row, pooled_summary, same_set
from support import ROOT

REGISTRY = SeedRegistry(development=(1, 2, 3), preregistered=(4, 5, 6, 7, 8, 9))


def _pooled(seeds, eps, status="preregistered", optimizer="DP-sgd", m=3000):
    return {"recipe": "r", "runs": ["r", "r_r2", "r_r3"], "seeds": list(seeds), "seed_status": status,
            "k_pos_per_run": 50, "k_neg_per_run": 0, "m": m, "r": 150, "v": 130, "delta": 1e-5,
            "accountant_epsilon": 8.0, "optimizer": optimizer, "eps_lb_95": eps, "ideal_eps_lb_95_median": 1.9,
            "ideal_eps_lb_95_median_mcse": 0.02, "ideal_trials": 20000, "ideal_percentile": 11.0,
            "ideal_percentile_mcse": 0.2,
            "single_runs": [{"run": "r", "seeds": [seeds[0]], "m": 1000, "r": 50, "v": 44, "eps_lb_95": 1.2,
                             "ideal_percentile": 18.0, "ideal_percentile_mcse": 0.3}]}


def _row(pooled, design="d1", streams=DERIVATION, registry=REGISTRY, before=True):
    return pooled_row(pooled, registry=registry, streams=streams, design_commit=design, params_commit="p",
                      params_sha256="h", lock="l", seeds_commit=design, registered_before=before)


def test_a_row_takes_its_seeds_status_from_params_now_not_from_the_audit():
    # the audit ran while 1-3 were preregistered; they are development seeds now: a development look
    row = _row(_pooled([1, 2, 3], 1.0, status="preregistered"))
    assert (row["phase"], row["seed_status"]) == ("development", "development")
    row = _row(_pooled([4, 5, 6], 1.6))
    assert (row["phase"], row["seed_status"], row["streams"]) == ("confirmation", "preregistered", DERIVATION)
    assert row["ideal_eps_lb_95_median_mcse"] == 0.02 and row["single_runs"][0]["ideal_percentile_mcse"] == 0.3
    assert _row(_pooled([4, 5, 6], 1.6), before=False)["phase"] == "development"


def test_one_row_per_recipe_seeds_and_streams():
    new = _row(_pooled([4, 5, 6], 1.6))
    legacy = {k: v for k, v in new.items() if k != "streams"}  # recorded before the derivation existed
    assert same_set(new, "r", [4, 5, 6], DERIVATION) and not same_set(new, "r", [4, 5, 6], "other")
    assert same_set(legacy, "r", [4, 5, 6], COUPLED_STREAMS) and not same_set(legacy, "r", [4, 5, 6], DERIVATION)
    assert not same_set(new, "r", [4, 5, 7], DERIVATION) and not same_set(new, "s", [4, 5, 6], DERIVATION)


def test_the_summary_has_one_bar_per_design_never_a_median_across_designs():
    old = [dict(_row(_pooled(s, e), design="d1", streams=COUPLED_STREAMS), superseded=True,
                superseded_reason="coupled") for s, e in (([4, 5, 6], 1.6), ([7, 8, 9], 1.5))]
    adam = dict(_row(_pooled([1, 2, 3], 0.9, optimizer="DP-adamw", m=6000), design="d0", streams=COUPLED_STREAMS),
                superseded=True, superseded_reason="coupled")
    fresh = _row(_pooled([4, 5, 6], 1.2), design="d1")  # the same seeds rerun under new streams: a new design bar
    summary = pooled_summary([adam, *old, fresh], REGISTRY)
    assert "median_eps_lb_95" not in summary
    bars = {(d["design_commit"], d["streams"]): d for d in summary["designs"]}
    assert len(bars) == 3
    assert bars[("d0", COUPLED_STREAMS)]["median_eps_lb_95"] is None  # its set is a development look
    assert bars[("d0", COUPLED_STREAMS)]["m_per_run"] == [2000]
    sgd = bars[("d1", COUPLED_STREAMS)]
    assert sgd["median_eps_lb_95"] == 1.55 and sgd["confirmation_sets"] == 2 and sgd["superseded"]
    assert sgd["superseded_reason"] == "coupled" and sgd["m_per_run"] == [1000]
    now = bars[("d1", DERIVATION)]
    assert now["median_eps_lb_95"] == 1.2 and not now["superseded"] and now["superseded_reason"] is None
    # a seed that becomes a development seed later leaves its design's bar, the row unchanged
    later = SeedRegistry(development=(1, 2, 3, 7), preregistered=(4, 5, 6, 8, 9))
    assert {d["median_eps_lb_95"] for d in pooled_summary(old, later)["designs"]} == {1.6}


def test_the_committed_pooled_json_is_labelled_and_its_summary_is_the_codes():
    data = json.loads((ROOT / "reports/audit_study/pooled.json").read_text())
    rows = data["rows"]
    assert all(r.get("streams") for r in rows)
    for r in rows:
        if r.get("streams") == COUPLED_STREAMS:
            assert r["superseded"] is True and r["superseded_reason"]
    set1 = next(r for r in rows if r["seeds"] == [3101, 3102, 3103])
    assert (set1["phase"], set1["seed_status"]) == ("development", "development")
    registry = load(SeedRegistry, "audit.seeds", ROOT / "params.yaml")
    assert data["summary"] == json.loads(json.dumps(pooled_summary(rows, registry)))
    keys = [(r["recipe"], r["seeds"], r["streams"]) for r in rows]
    assert len(keys) == len({json.dumps(k) for k in keys})  # one row per (recipe, seeds, streams)
