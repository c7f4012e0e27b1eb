"""The studies' tables over DVC experiments: an experiment's commit lives in the checkout that ran it, so a table
rebuilt in another checkout (a fresh clone holds no ``refs/exps``) keeps the experiments it already shows, as it
recorded them, and recomputes only those whose commits are here."""
import json

import pytest
from testkit.project import run

from flows.runtime.experiments import carried, experiment_commits
from stages.shared.core.errors import ConfigError

DESIGN = {"epsilon": 2.0, "rows": [1, 4, 8]}


def repo_with_table(tmp_path, names: list[str], design=DESIGN):
    run(["git", "init", "-q"], tmp_path)
    (tmp_path / "README").write_text("x\n")
    run(["git", "add", "-A"], tmp_path)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"], tmp_path)
    records = tmp_path / "reports" / "study"
    records.mkdir(parents=True)
    experiments = []
    for name in names:
        for kind in ("params.yaml", "dvc.lock"):
            (records / f"{name}.{kind}").write_text(f"{name} {kind}\n")
        experiments.append({"experiment": name, "commit": "0" * 40, "params": f"reports/study/{name}.params.yaml",
                            "lock": f"reports/study/{name}.dvc.lock", "rows": [{"v": len(name)}]})
    table = tmp_path / "reports" / "study.json"
    table.write_text(json.dumps({"design": design, "experiments": experiments}))
    return table


def test_a_table_keeps_the_experiments_this_checkout_did_not_run(tmp_path):
    table = repo_with_table(tmp_path, ["s-k1", "s-k4"])
    head = run(["git", "rev-parse", "HEAD"], tmp_path).stdout.strip()
    run(["git", "update-ref", "refs/exps/ab/cdef/s-k4", head], tmp_path)  # s-k4 ran here: it is recomputed
    commits = experiment_commits(tmp_path, "s-k")
    assert commits == {"s-k4": head}
    kept = carried(table, tmp_path, commits, DESIGN)
    assert [e["experiment"] for e in kept] == ["s-k1"] and kept[0]["rows"] == [{"v": 4}]
    assert carried(tmp_path / "reports" / "none.json", tmp_path, commits, DESIGN) == []  # no table yet


def test_a_carried_experiment_needs_its_kept_files_and_todays_design(tmp_path):
    table = repo_with_table(tmp_path, ["s-k1"])
    with pytest.raises(ConfigError, match="another design"):
        carried(table, tmp_path, {}, {**DESIGN, "epsilon": 8.0})
    assert carried(table, tmp_path, {"s-k1": "f" * 40}, {**DESIGN, "epsilon": 8.0}) == []  # nothing to carry
    (tmp_path / "reports" / "study" / "s-k1.dvc.lock").unlink()
    with pytest.raises(ConfigError, match=r"study\.json: experiment s-k1: its kept record .*s-k1\.dvc\.lock"):
        carried(table, tmp_path, {}, DESIGN)
