"""The report's user-level sections: the runs' one-run tests over canary users, and the comparison's committed table
(reports/user_level.json) with its prediction and what is not run yet."""
import json

from stages.audit.schema import BoundKeys
from stages.report.sections.user_level import user_audit_section, user_comparison_section
from support import ROOT

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
                            "rows": [_row("user-level DP-SGD", "user", 2.0, 0.3), _row("no DP", "user", None, 3.4)]}]
    f.write_text(json.dumps(data))
    s = user_comparison_section(f)
    cells = [c for row in s.tables[0].rows for c in map(str, row)]
    assert "user-level-k4-s3401 (aaaaaaaaaa)" in cells and "90 of 100 (1000)" in cells and "0.30" in cells
    assert "3401 (confirmation)" in cells and "–" in cells  # the non-DP run: no accountant epsilon, no ideal
    assert plan["design"]["prediction"] in " ".join(s.paragraphs) and "not yet tested as a whole" in s.paragraphs[0]
    assert user_comparison_section(tmp_path / "missing.json") is None


def test_the_runs_user_level_tests_are_one_row_each_with_their_status():
    runs = {"a": {"privacy": {"dp": True, "epsilon_spent": 8.0},
                  "audit_user": {"m": 1000, "k": 2, "r": 100, "v": 77, "delta": 1e-5, "eps_lb_95": 0.8,
                                 "eps_lb_99": 0.64, "mechanism_unit": "user", "ideal_eps_lb_95_median": 0.75,
                                 "ideal_eps_lb_95_median_mc95": [0.75, 0.75], "ideal_percentile": 60.0,
                                 "ideal_percentile_mcse": 0.3, "canary_user_auroc": 0.66,
                                 "canary_user_auroc_ci95": [0.63, 0.69], "seeds": [0], "seed_status": "development"}},
            "b": {"privacy": {"dp": False}}}
    s = user_audit_section(runs, KEYS)
    (row,) = s.tables[0].rows
    assert row[0] == "a" and row[1] == "user-level DP, accountant ε 8.00" and row[3] == "77 of 100"
    assert "development look" in row[-1] and row[-2] == "0.660 [0.630, 0.690]"
    assert user_audit_section({"b": runs["b"]}, KEYS) is None
