"""Recording pooled tests (flows/pooled_audit.py): the design commit is the oldest commit since which params.yaml
has held the recipe's pooled design unchanged, so a reviewer can check it predates the runs."""
import subprocess

import yaml

from flows.pooled_audit import design_commit
from support import project_raw


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
