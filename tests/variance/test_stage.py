"""The `variance` stage on a synthetic sweep table (labelled synthetic here; coefficients set in the test), and the
report section built from its output."""
import itertools
import json

import numpy as np
import pytest
import yaml
from testkit.project import ROOT

from stages.report.render import to_markdown
from stages.report.sections.variance import variance_section
from stages.shared.core.params import read_params
from stages.variance.__main__ import main
from stages.variance.schema import POINTS, read_points, write_points

SWEEP_HEADING = "The hyperparameter sweep (`variance.sweep`, seed sections 3-4):"


def no_study_models(p: dict, tmp_path) -> dict:
    """``p`` with the registered study's table in tmp_path, holding no model yet (not the project's live table)."""
    from dataclasses import asdict

    from stages.shared.core.params import build
    from stages.variance.params import StudyParams
    from stages.variance.schema import write_audit_points

    p["variance"]["study"]["table"] = str(tmp_path / "audit_points.parquet")
    study = build(StudyParams, p["variance"]["study"], "variance.study")
    write_audit_points(tmp_path / "audit_points.parquet", [],
                       {"study": json.loads(json.dumps(asdict(study))), "recipe": {}, "primary": {}})
    return p


def rows(seeds=2, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    out = []
    for (b, t, lr), s in itertools.product(itertools.product([8, 16], [8, 16], [0.005, 0.01]), range(seeds)):
        y = 0.1 * np.log(b) + 0.3 * np.log(t) + 0.5 * np.log(lr) + 3 + rng.normal(0, 0.02)
        profile = [{"delta": d, "epsilon": 8.0 * (1 + 0.01 * t) * (-np.log10(d)) / 5} for d in (1e-3, 1e-5, 1e-7)]
        out.append({f: None for f in POINTS.names} | {
            "point": f"syn-b{b}-t{t}-lr{lr}-s{s}", "rev": f"{s:040d}", "status": "completed", "epsilon": 8.0,
            "batch_size": b, "steps": t, "lr": lr, "seed": s, "utility": -2 + 0.1 * np.log(b * t * lr),
            "valid_loss": 2.0,
            "eps_spent": 8.0, "delta": 1e-5, "sigma": 0.5 + 0.01 * t, "sample_rate": b / 240, "measure": "air",
            "score_mean": y, "score_max": y + 0.2, "secrets": 6, "control_mean": y - 0.5, "profile": profile})
    out.append({f: None for f in POINTS.names} | {"point": "syn-failed", "status": "failed", "error": "worker lost",
                                                  "epsilon": 8.0, "batch_size": 8, "steps": 8, "lr": 0.005, "seed": 9,
                                                  "measure": "air"})
    return out


def test_table_round_trip_keeps_the_sweep_metadata(tmp_path):
    write_points(tmp_path / "t.parquet", rows(), {"sweep": "syn", "base_commit": "f" * 40})
    back, meta = read_points(tmp_path / "t.parquet")
    assert len(back) == 17 and back[-1]["error"] == "worker lost" and meta["sweep"] == "syn"
    write_points(tmp_path / "u.parquet", rows(), {"sweep": "syn", "base_commit": "f" * 40})
    assert (tmp_path / "t.parquet").read_bytes() == (tmp_path / "u.parquet").read_bytes()


def test_stage_writes_the_analysis_and_the_report_shows_it(tmp_path, monkeypatch):
    p = read_params(ROOT / "params.yaml")
    p["variance"].update(table=str(tmp_path / "points.parquet"), out_dir=str(tmp_path / "analysis"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(no_study_models(p, tmp_path)))
    write_points(tmp_path / "points.parquet", rows(), {"sweep": "syn", "base_commit": "f" * 40})
    main(["--params", str(tmp_path / "params.yaml")])
    a = json.loads((tmp_path / "analysis/analysis.json").read_text())
    assert a["completed"] == 16 and a["failed"] == [{"point": "syn-failed", "error": "worker lost"}]
    e = a["statistics"]["mean"]["8"]
    fit = e["regressions"]["individual"]["coefficients"]
    assert fit["log_lr"]["coef"] == pytest.approx(0.5, abs=3 * fit["log_lr"]["se"])
    assert e["variance"]["randomness_sd"] < e["variance"]["hyperparameter_sd"]
    # (8, 8, 0.005) dominates the whole 2x2x2 grid
    assert e["heuristics"]["individual"]["accuracy"] == 1.0 and e["selected"] == [8, 8, 0.005]
    assert len(e["profiles"]) == 4 and set(a["plots"]) == {"jitter", "selection_eps8", "profiles_eps8"}
    for f in a["plots"].values():
        assert (tmp_path / "analysis/plots" / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sec = variance_section(tmp_path / "analysis")
    text = " ".join(sec.paragraphs)
    assert "same ε = 8 at δ = 1e-05" in text and "worker lost" in text and len(sec.images) == 3
    assert all("δ = 1e-05" in cap for cap, _ in sec.images if "ε =" in cap)
    assert {row[1] for t in sec.tables if t.headers[:2] == ["statistic", "ε (δ)"] for row in t.rows} == \
        {"8 at δ = 1e-05"}
    # every trained arm above its randomised held-out control: a training effect, and the report says so
    assert e["control"]["higher"] == 16 and e["control"]["p"] < 1e-4 and "reflect training" in text
    assert a["statistics"]["max"]["8"]["control"]["skipped"].startswith("the control is the held-out")
    assert {t.headers[0] for t in sec.tables} >= {"statistic", "point (DVC experiment)"}
    assert variance_section(tmp_path / "nowhere") is None


@pytest.mark.parametrize("control_gap", [-0.5, 0.0])
def test_the_conclusion_follows_the_control_test(tmp_path, control_gap):
    """Trained secrets above their never-trained control (gap -0.5: the control scores lower) let the section
    conclude and name a pick; a control that scores like the trained arm (gap 0: every pair tied) is the landed
    sweep's case, and then the same spread is not evidence and no configuration is recommended."""
    p = read_params(ROOT / "params.yaml")
    p["variance"].update(table=str(tmp_path / "points.parquet"), out_dir=str(tmp_path / "analysis"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(no_study_models(p, tmp_path)))
    pts = [r | {"control_mean": r["score_mean"] + control_gap} if r["status"] == "completed" else r for r in rows()]
    write_points(tmp_path / "points.parquet", pts, {"sweep": "syn", "base_commit": "f" * 40})
    main(["--params", str(tmp_path / "params.yaml")])
    paras = variance_section(tmp_path / "analysis").paragraphs
    conclusion = paras[paras.index(SWEEP_HEADING) + 1]  # the study's account comes first
    assert "δ = 1e-05" in conclusion
    if control_gap < 0:
        assert "reach with different empirical leakage" in conclusion and "lowest privacy risk" in conclusion
    else:
        assert "reach with different empirical leakage" not in conclusion and "lowest privacy risk" not in conclusion
        assert "do not reflect training" in conclusion or "does not show that these scores reflect training" in \
            conclusion
        assert "no configuration is recommended" in conclusion
    # where the control fails (the max statistic always: it has none), no regression, heuristic or selection row
    sec = variance_section(tmp_path / "analysis")
    md = to_markdown("t", [sec], tmp_path)
    fitted = [ln for ln in md.splitlines() if ln.startswith("| mean") and ("log_lr" in ln or "ours (Alg. 1)" in ln)]
    (held,) = [x for x in sec.paragraphs if x.startswith("Not computed, for ")]
    assert "max at ε = 8 at δ = 1e-05" in held and ("mean at ε = 8" in held) == (control_gap >= 0)
    assert bool(fitted) == (control_gap < 0)
    assert ("selection_eps8" in json.loads((tmp_path / "analysis/analysis.json").read_text())["plots"]) == \
        (control_gap < 0)


def test_point_record_takes_the_randomised_held_out_arm_as_control():
    from stages.variance.table import point_record

    point = {"point": "p", "epsilon": 8.0, "batch_size": 8, "steps": 24, "lr": 0.005, "seed": 0}
    mem = {"trained": {"secrets": 12, "minus_base": 1 / 12, "max_minus_base": 1.0},
           "untrained": {"secrets": 12, "minus_base": 0.0, "max_minus_base": 0.0}}
    run = {"privacy": {"epsilon_spent": 8.0}, "utility": {"valid_nll": 2.1},
           "memorization": {"air": {"randomised": True, **mem}}}
    row = point_record(point, run, "air", "completed", None, {"rev": "a" * 40}, (0.95, 0.99))
    assert row["score_mean"] == pytest.approx(1 / 12) and row["control_mean"] == 0.0 and row["utility"] == -2.1
    # trained vs untrained by frequency (no coins) is confounded: no control
    run["memorization"]["air"]["randomised"] = False
    assert point_record(point, run, "air", "completed", None, None, (0.95, 0.99))["control_mean"] is None
