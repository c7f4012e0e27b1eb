"""The report's user-level sections: the runs' one-run tests over canary users, and the comparison's committed table
(reports/user_level.json) with its prediction and what is not run yet."""
import json
from dataclasses import replace

from testkit.project import ROOT
from testkit.records import committed_metrics, run_metrics

from stages.audit.schema import SeedStatus
from stages.report.sections.user_level import user_audit_section, user_comparison_section
from stages.shared.bounds.keys import BoundKeys

KEYS = [BoundKeys(0.95), BoundKeys(0.99)]


def _row(mechanism, unit, eps, lb):
    return {"mechanism": mechanism, "unit": unit, "epsilon": eps, "delta": 1e-5, "k": 4 if unit == "user" else 1,
            "m": 1000, "r": 100, "v": 90, "eps_lb_95": lb, "ideal_eps_lb_95_median": None if eps is None else 1.0,
            "ideal_percentile": None if eps is None else 50.0, "canary_user_auroc": 0.7,
            "canary_user_auroc_ci95": [0.65, 0.75], "members": 500, "non_members": 500, "valid_perplexity": 30.0,
            "seeds": [3401], "seed_status": "confirmation", "design_commit": "4fdce32e23"}


def test_the_comparison_table_shows_each_experiments_rows_and_says_what_is_not_run(tmp_path):
    plan = json.loads((ROOT / "reports/user_level_plan.json").read_text())
    data = {"design": plan["design"], "design_commit": plan["design_commit"], "recipe": "presets/user_level.args",
            "experiments": []}
    f = tmp_path / "user_level.json"
    f.write_text(json.dumps(data))
    empty = user_comparison_section(f)
    assert not empty.tables and "No experiment is recorded yet" in " ".join(empty.paragraphs)
    data["experiments"] = [{"experiment": "user-level-k4-s3401", "commit": "a" * 40, "k": 4, "seed": 3401,
                            "params": "p.yaml", "lock": "p.lock",
                            "rows": [_row("user-level DP-SGD", "user", 2.0, 0.3), _row("no DP", "user", None, 3.4)]}]
    f.write_text(json.dumps(data))
    s = user_comparison_section(f)
    cells = [c for row in s.tables[0].rows for c in map(str, row)]
    assert "user-level-k4-s3401 (aaaaaaaaaa)" in cells and "90 of 100 (1000)" in cells and "0.30" in cells
    assert "3401 (confirmation)" in cells and "–" in cells  # the non-DP run: no accountant epsilon, no ideal
    assert plan["design"]["prediction"] in " ".join(s.paragraphs) and "not yet tested as a whole" in s.paragraphs[0]
    assert "confirmed (each its seed's first run): k = 4 at seed 3401. Not yet confirmed: k = 1, 8," in s.paragraphs[0]
    assert user_comparison_section(tmp_path / "missing.json") is None
    # every k confirmed on its own seed; a second k at a seed that already ran is a development look, not counted
    look = [dict(r, seed_status="development") for r in data["experiments"][0]["rows"]]
    data["experiments"] += [{"experiment": f"user-level-k{k}-s{seed}", "commit": "b" * 40, "k": k, "seed": seed,
                             "params": "p.yaml", "lock": "p.lock", "rows": rows} for k, seed, rows in
                            [(1, 3402, data["experiments"][0]["rows"]), (8, 3401, look),
                             (8, 3403, data["experiments"][0]["rows"])]]
    f.write_text(json.dumps(data))
    words = user_comparison_section(f).paragraphs[0]
    assert "k = 1 at seed 3402, k = 4 at seed 3401, k = 8 at seed 3403." in words
    assert "Development looks, shown but not counted: user-level-k8-s3401." in words
    assert "Every k of the design is confirmed" in words and "not yet tested" not in words


def test_the_runs_user_level_tests_are_one_row_each_with_their_status():
    template = committed_metrics().runs["user_dp"]
    user = replace(template.audit_user, m=1000, k=2, r=100, v=77, delta=1e-5, mechanism_unit="user",
                   bounds={"eps_lb_95": 0.8, "eps_lb_99": 0.64, "ideal_eps_lb_95_median": 0.75,
                           "ideal_eps_lb_95_median_mc95": [0.75, 0.75]},
                   ideal_percentile=60.0, ideal_percentile_mcse=0.3, canary_user_auroc=0.66,
                   canary_user_auroc_ci95=[0.63, 0.69], seeds=[0], seed_status=SeedStatus.DEVELOPMENT)
    runs = {"a": run_metrics("user_dp", privacy=replace(template.privacy, dp=True, epsilon_spent=8.0),
                             audit_user=user),
            "b": run_metrics("nondp", privacy=replace(template.privacy, dp=False), audit_user=None)}
    s = user_audit_section(runs, KEYS)
    (row,) = s.tables[0].rows
    assert row[0] == "a" and row[1] == "user-level DP, accountant ε 8.00" and row[3] == "77 of 100"
    assert "development look" in row[-1] and row[-2] == "0.660 [0.630, 0.690]"
    assert user_audit_section({"b": runs["b"]}, KEYS) is None


def test_the_user_inference_section_shows_each_cell_and_plots_them(tmp_path):
    from types import SimpleNamespace

    from stages.report.sections.user_inference import user_inference_section

    design = {"dataset": "tofu_authors", "lengths": [10, 25], "per_length": 200, "documents": [1, None],
              "attack": "user_inference", "seed": 3501, "prediction": "AUROC rises."}

    def row(mech, eps, docs, members, auroc, ci):
        return {"mechanism": mech, "unit": None, "epsilon": eps, "delta": None, "length": 10, "documents": docs,
                "members": members, "non_members": 100, "auroc": auroc, "auroc_ci95": ci, "auroc_p_exact": None,
                "valid_perplexity": 20.0, "seed": 3501, "design_commit": "f" * 40}

    data = {"design": design, "design_commit": "f" * 40, "recipe": "presets/user_inference.args", "experiments": []}
    f = tmp_path / "user_inference.json"
    f.write_text(json.dumps(data))
    inp = SimpleNamespace(user_inference=f, plots_dir=tmp_path / "plots")
    empty = user_inference_section(inp)
    assert not empty.tables and not empty.images and "No experiment is recorded yet" in empty.paragraphs[0]
    data["experiments"] = [{"experiment": "user-inference-l10-s3501", "commit": "a" * 40, "length": 10, "seed": 3501,
                            "params": "p.yaml", "lock": "p.lock",
                            "rows": [row("no DP", None, "mixed", 100, 0.8, [0.74, 0.86]),
                                     row("no DP", None, 1, 50, 0.6, [0.5, 0.7]),
                                     row("no DP", None, "all", 50, 0.95, [0.9, 0.99]),
                                     row("user-level DP-SGD", 8.0, "all", 50, 0.5, [0.4, 0.6])]}]
    f.write_text(json.dumps(data))
    s = user_inference_section(inp)
    cells = [c for r in s.tables[0].rows for c in map(str, r)]
    assert "all counts together" in cells and "100 vs 100" in cells and "0.800 [0.740, 0.860]" in cells
    assert "8.00" in cells and s.images and s.images[0][1].is_file()
    assert "AUROC rises." in s.paragraphs[0] and "tested on 1 of its 2 lengths only" in s.paragraphs[0]
    assert "no correction over cells" in s.paragraphs[0]


def test_the_committed_plan_and_table_read_as_records_and_another_shape_is_refused(tmp_path):
    import pytest

    from stages.shared.core.errors import DataError
    from stages.shared.core.records import record_json
    from stages.shared.studies.user_inference import read_table as read_inference
    from stages.shared.studies.user_level import read_plan, read_table

    for name, read in (("user_level_plan.json", read_plan), ("user_level.json", read_table),
                       ("user_inference.json", read_inference)):
        path = ROOT / "reports" / name
        assert record_json(read(path)) == json.loads(path.read_text()), name  # leaf for leaf
    data = json.loads((ROOT / "reports/user_level.json").read_text())
    del data["experiments"][0]["rows"][0]["seed_status"]
    f = tmp_path / "user_level.json"
    f.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"user_level.json.experiments\[0\].rows\[0\]: missing key 'seed_status'"):
        read_table(f)
