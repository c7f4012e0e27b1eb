"""The README's "Audit your own private text" block runs as written: merged into the tiny project's params with only
the data file being ours (labelled synthetic tickets at the block's own path), `dvc repro` goes through both runs to
the report, the audit's pre-registered rule (the project's own, ``audit.primary``) scoring both runs' canaries. The
same block with the pre-registered attack dropped from a run's list stops at the first stage with one line naming
both keys, before anything trains (tiny Llama)."""
import json
import re

import pytest
import yaml
from testkit.project import ROOT, clone_project, run, tiny_params, without_replicas

from stages.shared.core.params import deep_merge, read_params

pytestmark = pytest.mark.slow


def readme_block() -> dict:
    section = (ROOT / "README.md").read_text().split("## Audit your own private text", 1)[1].split("\n## ", 1)[0]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))


def write_tickets(path, block: dict) -> None:
    """Labelled synthetic tickets in the block's field names: 40 customers of 12 tickets each, with phone numbers,
    e-mail addresses and account numbers of the block's named pattern in the text."""
    entry = block["preprocess"]["datasets"]["tickets"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i in range(480):
            f.write(json.dumps({entry["id_field"]: f"T{10000 + i}", entry["user_field"]: f"cust{i % 40}",
                                entry["text_field"]: f"ticket {i}: the router of cust{i % 40} drops every {i % 9 + 2} "
                                                     f"minutes; call 713-555-{1000 + i % 30} or write to "
                                                     f"user{i % 30}@example.com about ACC-{100000 + i % 20}"})
                    + "\n")


def project(src, tmp_path, tiny_model_dir, block: dict):
    """A copy of the tiny project ``src`` (reproduced or not) with its runs replaced by the block's (the block merged as
    the README says, over params.yaml), the project's own pre-registered rule, and the block's data file written at
    its path."""
    dest = clone_project(src, tmp_path / "project")
    p = without_replicas(tiny_params(tiny_model_dir))
    p["runs"], p["attack"]["runs"] = {}, {}
    p["audit"]["primary"] = read_params(ROOT / "params.yaml")["audit"]["primary"]
    # the template's own datasets and kinds the block does not use (the canaries' corpus stays): less to run
    p["preprocess"]["datasets"] = {"personachat": p["preprocess"]["datasets"]["personachat"]}
    p["secrets"]["datasets"] = {}
    p["canaries"]["kinds"] = ["new_token"]
    p["canaries"]["users"].update(enabled=False, dataset="personachat")  # the canaries stage's dep: a processed one
    (dest / "params.yaml").write_text(yaml.safe_dump(deep_merge(p, block), sort_keys=False))
    write_tickets(dest / block["preprocess"]["datasets"]["tickets"]["path"], block)
    run(["git", "add", "-A"], dest)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "the README's own text"], dest)
    return dest


def test_the_readmes_own_text_block_reaches_the_report(reproduced_template, tiny_model_dir, tmp_path):
    block = readme_block()
    dest = project(reproduced_template.path, tmp_path, tiny_model_dir, block)
    out = run(["dvc", "repro"], dest).stdout
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    assert {"preprocess@tickets", "secrets@tickets", "finetune@tickets_dp", "finetune@tickets_nondp",
            "attack@tickets_dp", "attack@tickets_nondp", "audit", "report"} <= ran
    metrics = json.loads((dest / "reports/metrics.json").read_text())
    primary = read_params(ROOT / "params.yaml")["audit"]["primary"]["attack"]
    for name in block["runs"]:
        assert metrics["runs"][name]["audit_primary"]["attack"] == primary  # the rule scored both runs' canaries
    users = metrics["runs"]["tickets_nondp"]["attacks"]["user_inference"]["users"]
    assert users["members"] > 0 and users["non_members"] > 0 and users["auroc"] is not None
    assert "vmr" in metrics["runs"]["tickets_nondp"]["memorization"]
    assert "tickets_nondp" in (dest / "reports/report.md").read_text()


def test_the_block_without_the_pre_registered_attack_stops_before_anything_trains(tiny_template, tiny_model_dir,
                                                                                  tmp_path):
    block = readme_block()
    primary = read_params(ROOT / "params.yaml")["audit"]["primary"]["attack"]
    block["attack"]["runs"]["tickets_nondp"] = [a for a in block["attack"]["runs"]["tickets_nondp"] if a != primary]
    dest = project(tiny_template, tmp_path, tiny_model_dir, block)  # not reproduced: nothing may be written
    proc = run(["dvc", "repro"], dest, check=False)
    assert proc.returncode != 0 and "Running stage 'finetune@" not in proc.stdout
    line = f"attack.runs.tickets_nondp: lacks '{primary}', the attack audit.primary.attack names"
    assert line in proc.stdout + proc.stderr
    assert not (dest / "data/models").exists()
