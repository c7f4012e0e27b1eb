"""Your own private text through the whole DAG with no code: a JSON Lines file and a CSV with unusual field names
(one with a user field and ``user_level``), declared in params only (``preprocess.datasets.<name>`` with
``kind: text``), the secrets of one (phone numbers and a named regex, ``secrets.datasets.<name>``), a DP and a non-DP
run on them with the default attack list plus VMR and user inference, `dvc repro` to the report: user inference over
110 held-in and 110 held-out users with its interval and blind baseline (tiny Llama; labelled synthetic text)."""
import csv
import json
import re

import pytest
import yaml
from testkit.project import clone_project, run, tiny_params, without_replicas

pytestmark = pytest.mark.slow


def write_data(dest) -> None:
    """Labelled synthetic: 10 support tickets of each of 220 customers (jsonl) and 80 FAQ question/answer rows
    (csv)."""
    raw = dest / "data/raw/mine"
    raw.mkdir(parents=True)
    with (raw / "tickets.jsonl").open("w") as f:
        for i in range(2200):
            f.write(json.dumps({"Ticket No": 5000 + i, "customer-handle": f"c{i % 220}",
                                "Body Text": f"order {i * 13} for customer c{i % 220} arrived late; the courier left "
                                             f"it at door {i % 7}, call 713-555-{1000 + i % 40} about "
                                             f"case CASE-{700 + i % 25}"}) + "\n")
    with (raw / "faq.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["Q?", "A!", "lang"])
        w.writeheader()
        w.writerows({"Q?": f"how do I reset device {i}?", "A!": f" hold button {i % 5} for {i % 9 + 2} seconds",
                     "lang": "en"} for i in range(80))


def text_params(model_dir) -> dict:
    p = tiny_params(model_dir)
    ds = p["preprocess"]["datasets"]
    common = {"kind": "text", "id_field": None, "user_field": None, "rows_per_user": None, "user_level": None,
              "split_field": None,
              "split": {"valid": 0.2, "test": 0.1}, "min_chars": 1, "max_chars": None, "dedupe": True, "seed": 0}
    p["preprocess"]["datasets"] = {
        "personachat": ds["personachat"],  # the canaries' corpus
        "tickets": {**common, "path": "data/raw/mine/tickets.jsonl", "format": "jsonl", "text_field": "Body Text",
                    "prompt_field": None, "completion_field": None, "id_field": "Ticket No",
                    "user_field": "customer-handle", "rows": {"train": [660, 660], "attacker": [440, 440]},
                    "user_level": {"heldout_fraction": 0.2, "attacker_fraction": 0.25, "min_rows": 10,
                                   "max_users": None}},
        "faq": {**common, "path": "data/raw/mine/faq.csv", "format": "csv", "text_field": None, "prompt_field": "Q?",
                "completion_field": "A!", "rows": {}}}
    p["secrets"]["datasets"] = {"tickets": {
        "extractors": ["phone", "case"], "patterns": {"case": r"CASE-\d{3}"}, "prompt_chars": 40,
        "prompt_fraction": 0.6, "min_occurrences": 1, "max_per_kind": None, "base_check": True,
        "mining": {"ngram_chars": 40, "top_k": 20, "min_count": 3}}}
    p["finetune"]["secret_control"]["secrets"] = 40
    p["canaries"].update(kinds=["new_token"])
    p["canaries"]["users"].update(enabled=False, dataset="personachat")  # the canaries stage's dep: a processed one
    p["runs"] = {"tickets_dp": {"dataset": "tickets", "secrets": "tickets", "dp": {"enabled": True, "epsilon": 8.0},
                                "max_text_rows": 660},  # every held-in user's training rows
                 "faq_nondp": {"dataset": "faq", "secrets": "none"}}
    without_replicas(p)
    p["attack"]["runs"] = {"tickets_dp": None, "faq_nondp": None}  # the default list on both: what a run cannot have
    # is left out with the reason
    p["attack"]["attacks"] = [*p["attack"]["attacks"], "vmr", "user_inference"]
    p["audit"]["exploratory"].update(k_pos=[5], k_neg=[0])
    return p


def test_a_jsonl_and_a_csv_declared_in_params_run_dp_and_non_dp_to_the_report(reproduced_template, tiny_model_dir,
                                                                             tmp_path):
    dest = clone_project(reproduced_template.path, tmp_path / "project")  # its base model and corpus up to date
    write_data(dest)
    (dest / "params.yaml").write_text(yaml.safe_dump(text_params(tiny_model_dir), sort_keys=False))
    run(["git", "add", "-A"], dest)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "my text"], dest)
    out = run(["dvc", "repro"], dest).stdout
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    assert {"preprocess@tickets", "preprocess@faq", "secrets@tickets", "finetune@tickets_dp", "finetune@faq_nondp",
            "audit", "report"} <= ran
    gx = json.loads((dest / "data/processed/tickets/gx_results.json").read_text())
    assert all(s["success"] for s in gx.values()) and {"tickets_user_sets", "tickets_train_is_held_in"} <= set(gx)
    metrics = json.loads((dest / "reports/metrics.json").read_text())
    dp, nondp = metrics["runs"]["tickets_dp"], metrics["runs"]["faq_nondp"]
    assert dp["privacy"]["dp"] and dp["privacy"]["epsilon_spent"] == pytest.approx(8.0, rel=0.02)
    assert not nondp["privacy"]["dp"]
    for r, name in ((dp, "tickets"), (nondp, "faq")):
        assert r["dataset"] == name
        assert 0 <= r["attacks"]["loss"]["text"]["auroc"] <= 1  # text MIA: trained rows vs held-out rows
        assert 0 <= r["attacks"]["loss"]["new_token"]["auroc"] <= 1 and "eps_lb_95" in r["audit_primary"]
    vmr = dp["memorization"]["vmr"]  # the tickets' real secrets, with the randomised control
    assert vmr["randomised"] and 0 < vmr["control"]["candidates"] <= 40 and vmr["trained"]["secrets"] > 0
    assert "vmr" in nondp["attacks_skipped"]  # the csv declares no secrets: left out, with the reason
    assert "user_inference" in nondp["attacks_skipped"]  # nor users
    users = dp["attacks"]["user_inference"]["users"]  # every customer: the attacker's samples, never trained on
    assert users["members"] == users["non_members"] == 110 and users["auroc_ci95"] is not None
    assert "users" in dp["blind"]  # the model-free baseline on the same users
    report = (dest / "reports/report.md").read_text()
    assert "tickets_dp" in report and "faq_nondp" in report
    row = next(line for line in report.splitlines() if "user_inference" in line and "110 / 110" in line)
    assert re.search(r"\[0\.\d+, [01]\.\d+\]", row)  # its AUROC with the 95% interval
