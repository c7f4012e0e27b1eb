"""Recording pooled tests (flows/pooled_audit.py): the design commit is the oldest commit since which params.yaml
has held the recipe's pooled design unchanged, so a reviewer can check it predates the runs."""
import json
import subprocess

import pytest
import yaml
from testkit.project import project_raw

from flows.pooled_audit import design_commit, record, seeds_commit
from stages.shared.core.errors import ConfigError


def _commit(repo, raw, message):
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    subprocess.run(["git", "add", "params.yaml"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message], cwd=repo,
                   check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()


def test_the_design_commit_is_where_the_pooled_design_last_changed(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    raw = project_raw()
    _commit(tmp_path, raw, "first design")
    raw["audit"]["pooled"]["dp_eps8"]["k_pos"] += 50
    changed = _commit(tmp_path, raw, "the rule changed")
    raw["report"]["title"] = "another title"  # not part of the design
    _commit(tmp_path, raw, "unrelated")
    assert design_commit(str(tmp_path), "dp_eps8") == changed
    raw["replicas"]["sets"]["dp_eps8_r9"] = {"run": "dp_eps8", "seed": 3109}
    added = _commit(tmp_path, raw, "a replica added")
    assert design_commit(str(tmp_path), "dp_eps8") == added


def test_seeds_are_not_the_design_and_their_registration_is_dated(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    raw = project_raw()
    design = _commit(tmp_path, raw, "the design")
    raw["audit"]["seeds"]["preregistered"] = [7001, 7002, 7003]
    registered = _commit(tmp_path, raw, "fresh seeds registered")
    raw["canaries"]["seed"] = raw["finetune"]["seed"] = 7001  # the runs move to them: not a design change
    raw["canaries"]["formatted"]["seed"] = 7001
    raw["replicas"]["sets"] = {"dp_eps8_r2": {"run": "dp_eps8", "seed": 7002},
                               "dp_eps8_r3": {"run": "dp_eps8", "seed": 7003}}
    raw["audit"]["primary"]["runs"]["nondp"] = {"k_pos": 7, "k_neg": 0}  # another run's rule: not this recipe's
    raw["audit"]["primary"]["no_dp"] = {"k_pos": 9, "k_neg": 0}  # design, nor the rule of runs without DP
    _commit(tmp_path, raw, "the runs at the fresh seeds")
    assert design_commit(str(tmp_path), "dp_eps8") == design
    assert seeds_commit(str(tmp_path), [7001, 7003]) == registered
    assert seeds_commit(str(tmp_path), [7001, 9]) is None
    raw["runs"]["dp_eps8"]["lr"] = 0.1  # the recipe itself is the design
    lr = _commit(tmp_path, raw, "lr")
    assert design_commit(str(tmp_path), "dp_eps8") == lr


@pytest.mark.slow
def test_a_dvc_experiments_pooled_test_is_recorded_with_its_baseline(tmp_path):
    """A confirmation set run as `dvc exp run` (real DVC): its row names the experiment, its baseline commit as the
    params commit, the seeds' registration commit and a copy of the experiment's dvc.lock; rows are never rewritten."""
    import numpy as np
    from testkit.project import params as section_params

    from stages.audit.params import AuditParams
    from stages.audit.pooled import pooled_test
    from stages.finetune.schema import PrivacyRecord

    run = lambda *a: subprocess.run(list(a), cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("git", "init", "-q")
    run("dvc", "init", "-q")
    raw = project_raw()
    raw["audit"]["seeds"]["preregistered"] = [7001, 7002]
    audit = section_params(AuditParams, "audit", ceiling={"trials": 200, "planned": {}},
                           seeds={"preregistered": [7001, 7002]})
    rng = np.random.default_rng(0)
    members = []
    for name, seed in (("dp_eps8", 7001), ("dp_eps8_r2", 7002)):
        y = rng.random(300) < 0.5
        members.append({"run": name, "seeds": [seed], "scores": rng.normal(size=300) + 2.0 * y, "labels": y,
                        "privacy": PrivacyRecord(sample_rate=0.23, steps=10, noise_multiplier=0.8, epsilon_spent=8.0,
                                                 delta=1e-5, optimizer="DP-sgd", secure_rng=False, dp=True)})
    pooled = pooled_test(members, (20, 0), 1e-5, audit, "confirmation")
    (tmp_path / "pooled_fixture.json").write_text(json.dumps({"pooled": {"dp_eps8": pooled}}))
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"audit": {
        "cmd": "mkdir -p reports && cp pooled_fixture.json reports/metrics.json",
        "deps": ["pooled_fixture.json"], "params": ["audit.pooled"],
        "metrics": [{"reports/metrics.json": {"cache": False}}]}}}))
    first = _commit(tmp_path, raw, "design and seeds")
    run("git", "add", "-A")
    run("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pipeline")
    baseline = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                              text=True).stdout.strip()
    run("dvc", "exp", "run", "-q", "-n", "set9", "-S", "canaries.seed=7001")  # a seed: not the design
    (row,) = record(str(tmp_path), "set9")
    assert (row["experiment"], row["params_commit"], row["phase"]) == ("set9", baseline, "confirmation")
    ledger = json.loads((tmp_path / "reports/audit_study/seed_ledger.json").read_text())["entries"]
    assert [(e["recipe"], e["seeds"], e["experiment"], e["registered_before"]) for e in ledger] == [
        ("dp_eps8", [7001, 7002], "set9", True)]  # the run's seed ledger entry: the set's first run
    assert row["seeds_commit"] == row["design_commit"] == first
    lock = (tmp_path / "reports/audit_study" / row["lock"]).read_text()
    assert "audit:" in lock and (row["m"], row["r"], row["v"]) == (pooled["m"], pooled["r"], pooled["v"])
    other = {**raw, "audit": {**raw["audit"], "pooled": {"dp_eps8": {"k_pos": 21, "k_neg": 0}}}}
    assert design_commit(str(tmp_path), "dp_eps8", baseline, other) is None  # an experiment's own design
    with pytest.raises(ConfigError, match="already recorded"):
        record(str(tmp_path), "set9")
    with pytest.raises(ConfigError, match="no DVC experiment"):
        record(str(tmp_path), "set8")
