"""pooled.json rows and bars (stages/tools/studies/study.py): a row's phase is the seed ledger's status of its set, each
row names its design and stream derivation, one row per (recipe, seeds, streams), and the summary gives one bar per
design over that design's confirmation sets."""
import json

from testkit.project import ROOT

from stages.shared.core.seeds import DERIVATION
from stages.tools.studies.study import COUPLED_STREAMS, pooled_row, pooled_summary, same_set


def _pooled(seeds, eps, optimizer="DP-sgd", m=3000):
    return {"recipe": "r", "runs": ["r", "r_r2", "r_r3"], "seeds": list(seeds), "seed_status": "confirmation",
            "k_pos_per_run": 50, "k_neg_per_run": 0, "m": m, "r": 150, "v": 130, "delta": 1e-5,
            "accountant_epsilon": 8.0, "optimizer": optimizer, "eps_lb_95": eps, "ideal_eps_lb_95_median": 1.9,
            "ideal_eps_lb_95_median_mcse": 0.02, "ideal_trials": 20000, "ideal_percentile": 11.0,
            "ideal_percentile_mcse": 0.2,
            "single_runs": [{"run": "r", "seeds": [seeds[0]], "m": 1000, "r": 50, "v": 44, "eps_lb_95": 1.2,
                             "ideal_percentile": 18.0, "ideal_percentile_mcse": 0.3}]}


def _row(pooled, design="d1", streams=DERIVATION, status="confirmation"):
    return pooled_row(pooled, status=status, streams=streams, design=design, design_commit=f"c-{design}",
                      params_commit="p", params_sha256="h", lock="l", seeds_commit="s")


def test_a_row_is_phased_by_the_ledger_status_it_is_given():
    row = _row(_pooled([4, 5, 6], 1.6))
    assert (row["phase"], row["ledger_status"], row["streams"], row["design"]) == ("confirmation", "confirmation",
                                                                                  DERIVATION, "d1")
    assert row["ideal_eps_lb_95_median_mcse"] == 0.02 and row["single_runs"][0]["ideal_percentile_mcse"] == 0.3
    assert _row(_pooled([4, 5, 6], 1.6), status="development")["phase"] == "development"


def test_one_row_per_recipe_seeds_and_streams():
    new = _row(_pooled([4, 5, 6], 1.6))
    legacy = {k: v for k, v in new.items() if k != "streams"}  # recorded before the derivation existed
    assert same_set(new, "r", [4, 5, 6], DERIVATION) and not same_set(new, "r", [4, 5, 6], "other")
    assert same_set(legacy, "r", [4, 5, 6], COUPLED_STREAMS) and not same_set(legacy, "r", [4, 5, 6], DERIVATION)
    assert not same_set(new, "r", [4, 5, 7], DERIVATION) and not same_set(new, "s", [4, 5, 6], DERIVATION)


def test_the_summary_has_one_bar_per_design_over_its_confirmation_sets_only():
    old = [dict(_row(_pooled(s, e), design="d1", streams=COUPLED_STREAMS), superseded=True,
                superseded_reason="coupled") for s, e in (([4, 5, 6], 1.6), ([7, 8, 9], 1.5))]
    adam = dict(_row(_pooled([1, 2, 3], 0.9, optimizer="DP-adamw", m=6000), design="d0", streams=COUPLED_STREAMS,
                     status="development"), superseded=True, superseded_reason="coupled")
    rerun = _row(_pooled([4, 5, 6], 1.2), design="d2", status="development")  # 4-6 ran before under d1
    fresh = _row(_pooled([10, 11, 12], 1.8), design="d2")
    again = dict(fresh, eps_lb_95=1.7)  # the same set reproduced: counted once, at its first row
    summary = pooled_summary([adam, *old, rerun, fresh, again])
    assert "median_eps_lb_95" not in summary
    bars = {(d["design"], d["streams"]): d for d in summary["designs"]}
    assert len(bars) == 3
    assert bars[("d0", COUPLED_STREAMS)]["median_eps_lb_95"] is None  # its set is a development look
    assert bars[("d0", COUPLED_STREAMS)]["m_per_run"] == [2000]
    sgd = bars[("d1", COUPLED_STREAMS)]
    assert sgd["median_eps_lb_95"] == 1.55 and sgd["confirmation_sets"] == 2 and sgd["superseded"]
    assert sgd["superseded_reason"] == "coupled" and sgd["m_per_run"] == [1000]
    now = bars[("d2", DERIVATION)]
    assert (now["median_eps_lb_95"], now["confirmation_sets"], now["development_sets"]) == (1.8, 1, 1)
    assert now["confirmation_seeds"] == [[10, 11, 12]] and not now["superseded"]


def test_the_committed_pooled_json_names_each_rows_ledger_status_and_its_summary_is_the_codes():
    data = json.loads((ROOT / "reports/audit_study/pooled.json").read_text())
    rows = data["rows"]
    assert all(r.get("streams") and r.get("design") for r in rows)
    assert all(r["ledger_status"] in ("confirmation", "development") for r in rows)
    for r in rows:
        if r.get("streams") == COUPLED_STREAMS:
            assert r["superseded"] is True and r["superseded_reason"]
    status = {(tuple(r["seeds"]), r["streams"]): r["ledger_status"] for r in rows}
    assert status[((3101, 3102, 3103), COUPLED_STREAMS)] == "development"
    # the third run of 3104-3106 (its first under this design was the second run): a development look
    assert status[((3104, 3105, 3106), DERIVATION)] == "development"
    assert status[((3111, 3112, 3113), DERIVATION)] == "confirmation"
    assert data["summary"] == json.loads(json.dumps(pooled_summary(rows)))
    keys = [(r["recipe"], r["seeds"], r["streams"]) for r in rows]
    assert len(keys) == len({json.dumps(k) for k in keys})  # one row per (recipe, seeds, streams)
