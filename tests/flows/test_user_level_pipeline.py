"""End to end on the reproduced tiny project: a user-level DP run trained on the audit users (canaries.audit_users)
gets its one-run test over canary users through DVC (fine-tune, attack, audit, report), with its lineage and card;
the existing runs stay up to date (the audit users are a file of the canaries stage, trained only where asked)."""
import json

import pytest
import yaml
from testkit.project import run

pytestmark = pytest.mark.slow


def test_a_user_level_run_gets_its_user_level_audit_and_card(reproduced_project):
    dest = reproduced_project
    p = yaml.safe_load((dest / "params.yaml").read_text())
    p["runs"]["u"] = {"dataset": "enron_users", "secrets": "enron", "canaries": False, "user_canaries": True,
                      "objective": "nwp", "max_text_rows": 24, "sample_rate": 0.05, "steps": 3, "seed": 0,
                      "dp": {"enabled": True, "epsilon": 8.0, "delta": 1e-5, "unit": "user", "rows_per_user": 4}}
    p["attack"]["runs"]["u"] = ["contrast"]
    p["audit"]["user"] = {"attack": "contrast", "k_pos": 20, "k_neg": 0}
    (dest / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    stale = set(json.loads(run(["dvc", "status", "--json"], dest).stdout))
    assert stale == {"finetune@u", "attack@u", "audit"}  # the report follows once the audit's output changes
    run(["dvc", "repro", "report"], dest)
    metrics = json.loads((dest / "reports/metrics.json").read_text())
    u = metrics["runs"]["u"]["audit_user"]
    k = p["canaries"]["audit_users"]["rows"]
    assert (u["unit"], u["mechanism_unit"], u["m"], u["k"], u["r"]) == ("user", "user", 1000, k, 20)
    assert u["members"] + u["non_members"] == 1000 and 0 <= u["v"] <= 20
    assert u["eps_lb_95"] <= metrics["runs"]["u"]["privacy"]["epsilon_spent"]
    assert u["ideal_eps_lb_95_median"] is not None and 0 <= u["ideal_percentile"] <= 100
    assert u["seed_status"] == "development" and u["seeds"] == [0]
    assert "audit_user" not in metrics["runs"]["dp"]  # a run without the audit users has no user-level test
    headline = json.loads((dest / "reports/headline.json").read_text())["u"]
    assert headline["audit_user_eps_lb_95"] == pytest.approx(u["eps_lb_95"])
    html = (dest / "reports/index.html").read_text()
    assert 'id="headline-u"' in html and "user-level audit ε̂" in html
    assert "Users: the one-run audit over canary users" in html
    lineage = json.loads((dest / "reports/lineage.json").read_text())
    assert "runs.u.audit_user.eps_lb_95" in lineage
