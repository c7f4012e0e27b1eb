"""One lineage implementation (stages.shared.core.lineage) behind the report's lineage.json and `leakaudit lineage`: a
per-run number follows only its own run's branch of a foreach, nearest first, on a hand-made dvc.lock."""
import json

import yaml

from leakaudit.trace import trace
from stages.shared.core.lineage import number_chain, number_lineage


def _stage(deps, outs, params=None):
    return {"cmd": "python -m x", "deps": [{"path": p, "md5": f"{p}-md5"} for p in deps],
            "outs": [{"path": p, "md5": f"{p}-md5"} for p in outs], "params": {"params.yaml": params or {}}}


LOCK = {"canaries": _stage(["data/raw/c.txt"], ["data/canaries"]),
        "finetune@a": _stage(["data/canaries"], ["data/models/a"]),
        "finetune@b": _stage(["data/canaries"], ["data/models/b"]),
        "attack@a": _stage(["data/models/a"], ["data/scores/a"]),
        "attack@b": _stage(["data/models/b"], ["data/scores/b"]),
        "audit": _stage(["data/canaries", "data/scores", "stages/audit"], ["reports/metrics.json"], {"audit.seed": 0})}


def test_a_run_number_follows_its_own_branch_first_and_never_another_runs():
    assert number_chain(LOCK, "audit", "runs.a.privacy.steps") == ["audit", "attack@a", "finetune@a", "canaries"]
    assert number_chain(LOCK, "audit", "runs.b.x") == ["audit", "attack@b", "finetune@b", "canaries"]
    every = number_chain(LOCK, "audit", "shift_check.alpha")  # not a run's number: every branch
    assert set(every) == set(LOCK) and every[0] == "audit"


def test_report_lineage_and_trace_give_the_same_chain(tmp_path):
    metrics = {"runs": {"a": {"privacy": {"steps": 80, "dp": True}}, "b": {"v": 1.5}}, "planned": {"gpu": {"q": 0.1}}}
    lin = number_lineage(metrics, LOCK, {"commit": "c0ffee", "dirty": False}, True)
    assert set(lin) == {"runs.a.privacy.steps", "runs.b.v", "planned.gpu.q"}  # numbers only (no bools)
    entry = lin["runs.a.privacy.steps"]
    assert entry["upstream"] == ["attack@a", "finetune@a", "canaries"] and entry["value"] == 80
    assert entry["inputs"]["data/scores"] == "data/scores-md5" and entry["params"] == {"audit.seed": 0}
    assert lin["planned.gpu.q"]["upstream"] == [] and lin["planned.gpu.q"]["inputs"] == {}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": LOCK}))
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports/metrics.json").write_text(json.dumps(metrics))
    t = trace("reports/metrics.json:runs.a.privacy.steps", tmp_path, check=False)
    assert t["stage"] == "audit" and [s["stage"] for s in t["chain"]] == ["audit", *entry["upstream"]]
    origins = {d["path"]: d["from"] for d in t["chain"][0]["deps"]}
    assert origins == {"data/canaries": "canaries", "data/scores": "attack@a, attack@b", "stages/audit": "code"}
    assert t["raw"] == [{"path": "data/raw/c.txt", "md5": "data/raw/c.txt-md5"}]
