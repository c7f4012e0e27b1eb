"""Study rows: each design's counts read from the exploratory family, its uncorrected bounds, the ideal of the
same rule at the run's own (q, T, sigma), and the flow's plan (seeds, profiles, overrides)."""
import numpy as np
import pytest
from testkit.project import params

from stages.shared.bounds.ceiling import ideal_audit
from stages.shared.bounds.one_run import epsilon_lower_bound
from stages.tools.studies.params import StudyParams
from stages.tools.studies.study import study_rows, summarise


def _metrics():
    tests = [{"attack": "loss", "same_ranking": ["zlib", "min_k"], "kind": "new_token", "k_pos": 100, "k_neg": 0,
              "m": 1000, "r": 100, "v": 60},
             {"attack": "loss", "same_ranking": ["zlib", "min_k"], "kind": "new_token", "k_pos": 100, "k_neg": 100,
              "m": 1000, "r": 200, "v": 110},
             {"attack": "whitebox", "same_ranking": [], "kind": "new_token", "k_pos": 100, "k_neg": 0,
              "m": 1000, "r": 100, "v": 85},
             {"attack": "whitebox", "same_ranking": [], "kind": "new_token", "k_pos": 100, "k_neg": 100,
              "m": 1000, "r": 200, "v": 170}]
    privacy = {"sample_rate": 0.23, "steps": 10, "noise_multiplier": 0.816, "delta": 1e-5, "epsilon_spent": 8.0}
    return {"runs": {"dp_eps8": {"privacy": privacy, "audit_exploratory": {"tests": tests},
                                 "utility": {"valid_perplexity": 30.0}}}}


def test_rows_are_uncorrected_bounds_next_to_the_same_rules_ideal():
    study = params(StudyParams, "study", scores=["min_k", "whitebox"], attacks=["loss", "min_k", "whitebox"])
    rows = study_rows(_metrics(), study, seed=3, phase="development", profile="q0.23_T10", experiment="e",
                      rev="r", trials=200, ceiling_seed=0,
                      threat_models={"min_k": "black-box log-probabilities", "whitebox": "white-box weights"})
    assert [(r["score"], r["k_pos"], r["k_neg"]) for r in rows] == [
        ("min_k", 100, 0), ("min_k", 100, 100), ("whitebox", 100, 0), ("whitebox", 100, 100)]
    wb = rows[2]
    assert (wb["v"], wb["threat_model"]) == (85, "white-box weights")
    assert rows[0]["v"] == 60  # min_k is declared to rank like loss: the loss test's counts
    assert wb["eps_lb_95"] == pytest.approx(epsilon_lower_bound(1000, 100, 85, 1e-5, 0.95))
    ideal = ideal_audit(0.23, 10, 0.816, m=1000, k_pos=100, k_neg=0, delta=1e-5, confidences=[0.95], trials=200,
                        seed=0)
    assert wb["ideal_eps_lb_95_median"] == pytest.approx(ideal["ideal_eps_lb_95_median"])
    assert not any("efficiency" in k for k in wb)
    assert 0 <= wb["ideal_percentile"] <= 100 and rows[0]["ideal_percentile"] < wb["ideal_percentile"]
    s = {x["design"]: x for x in summarise(rows)}
    assert s["whitebox k+100 k-0"]["median_eps_lb_95"] == pytest.approx(wb["eps_lb_95"])


def test_plan_moves_every_seed_and_drops_the_other_runs():
    from testkit.project import project_raw

    from flows.audit_study import plan

    raw = project_raw()
    study = params(StudyParams, "study")
    dev = plan("development", study, raw)
    assert len(dev) == len(study.development_seeds) * len(study.profiles)
    point = next(iter(dev.values()))
    seed = point["seed"]
    assert f"canaries.seed={seed}" in point["sets"] and f"finetune.seed={seed}" in point["sets"]
    assert all(f"~runs.{r}" in point["sets"] for r in raw["runs"] if r != study.run)
    conf = plan("confirmation", study, raw)
    assert {p["seed"] for p in conf.values()} == set(study.confirmation_seeds)
    assert not {p["seed"] for p in conf.values()} & set(study.development_seeds)
    rec = plan("recipes", study, raw)
    assert any(f"++runs.{study.run}.dp.max_grad_norm=0.1" in p["sets"] for p in rec.values())
    assert np.all([p["recipe"] for p in rec.values()])
