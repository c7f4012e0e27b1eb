"""User inference with power (stages/tools/studies/user_inference.py, flows/user_inference.py): the design refuses fewer
than 100 users a side, the rows carry each mechanism's length cell and its documents cells, and the flow's overrides
give valid params with every TOFU author a canary user."""
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from testkit import records
from testkit.records import group, run_metrics

from stages.audit.schema import Utility
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import build
from stages.tools.studies.user_inference import MECHANISMS, ROW_KEYS, UserInferenceStudyParams, inference_rows

GOOD = dict(dataset="tofu_authors", lengths=[10, 1], per_length=200, documents=[1, None], attack="user_inference",
            seed=7, prediction="p")


def test_the_design_is_validated_naming_the_key():
    assert build(UserInferenceStudyParams, GOOD, "user_inference").documents == (1, None)
    with pytest.raises(ConfigError, match="user_inference.per_length: must be >= 200"):
        build(UserInferenceStudyParams, {**GOOD, "per_length": 16}, "user_inference")
    with pytest.raises(ConfigError, match="user_inference.documents"):
        build(UserInferenceStudyParams, {**GOOD, "documents": [0]}, "user_inference")


def _cell(members, auroc, ci=(0.6, 0.8)):
    return group(auroc, members, 100, auroc_ci95=list(ci))


def test_rows_are_the_length_cell_then_each_documents_cell_per_mechanism():
    def run(dp):
        privacy = (replace(run_metrics("dp_eps8").privacy, epsilon_spent=8.0, delta=1e-5) if dp
                   else run_metrics("nondp").privacy)
        return run_metrics(privacy=privacy, utility=Utility(valid_nll=3.0, valid_perplexity=20.0),
                           canary_users_by_length={"user_inference": {"10": _cell(100, 0.7)}},
                           canary_users_by_documents={"user_inference": {"10:all": _cell(33, 0.9),
                                                                         "10:1": _cell(34, 0.55),
                                                                         "25:1": _cell(34, 0.5)}})

    metrics = records.metrics(runs={"ui_nondp": run(False), "ui_example": run(True), "ui_user": run(True)})
    rows = inference_rows(metrics, "user_inference", 10, 7, "abc")
    assert len(rows) == 3 * len(MECHANISMS) and all(tuple(r) == ROW_KEYS for r in rows)
    nondp = [r for r in rows if r["mechanism"] == "no DP"]
    assert [(r["documents"], r["members"], r["auroc"]) for r in nondp] == [("mixed", 100, 0.7), (1, 34, 0.55),
                                                                          ("all", 33, 0.9)]  # not the other length
    assert nondp[0]["epsilon"] is None and nondp[0]["unit"] is None and nondp[0]["design_commit"] == "abc"
    user = [r for r in rows if r["mechanism"] == "user-level DP-SGD"]
    assert user[0]["epsilon"] == 8.0 and user[0]["unit"] == "user" and user[0]["seed"] == 7


def test_the_flows_overrides_give_valid_params_with_every_author_a_canary_user(tmp_path):
    from dvc.utils.hydra import apply_overrides
    from testkit.project import ROOT

    from flows.user_inference import overrides
    from stages.canaries.params import CanaryParams
    from stages.finetune.params import load_finetune
    from stages.params import validate_params
    from stages.shared.core.params import load, read_params

    raw = read_params(ROOT / "params.yaml")
    design = load(UserInferenceStudyParams, "user_inference", ROOT / "params.yaml", raw)
    for f in ("params.yaml", "studies.yaml"):
        shutil.copy(ROOT / f, tmp_path / f)
    apply_overrides(str(tmp_path / "params.yaml"), overrides(Path(ROOT), design, design.lengths[0]))
    p = read_params(tmp_path / "params.yaml")
    validate_params(p)
    assert list(p["runs"]) == list(MECHANISMS) and not p["replicas"]["sets"]
    assert p["preprocess"]["datasets"]["tofu_authors"]["user_level"]["max_users"] is None  # all 200 authors
    users = load(CanaryParams, "canaries", tmp_path / "params.yaml", p).users
    assert (users.dataset, users.lengths, users.per_length, users.seed) == (
        "tofu_authors", (design.lengths[0],), design.per_length, design.seed)
    units = {}
    for run in p["runs"]:
        ft = load_finetune(run, tmp_path / "params.yaml", p)
        assert ft.seed == design.seed and ft.dataset == "tofu_authors" and not ft.canaries
        assert p["attack"]["runs"][run] == [design.attack]
        units[run] = ft.dp.unit if ft.dp.enabled else None
    assert units == {"ui_nondp": None, "ui_example": "example", "ui_user": "user"}
    with pytest.raises(ConfigError, match="--length 3"):
        overrides(Path(ROOT), design, 3)


def test_the_table_refuses_an_experiment_run_under_another_design(tmp_path):
    """The table says its design was fixed before its runs: an experiment whose studies.yaml held another
    user_inference design is refused, naming it."""
    import subprocess

    import yaml
    from testkit.project import ROOT

    from flows.user_inference import table
    from stages.shared.core.params import load, read_params

    def git(*args):
        subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    for f in ("params.yaml", "studies.yaml"):
        shutil.copy(ROOT / f, tmp_path / f)
    git("init", "-q")
    studies = yaml.safe_load((tmp_path / "studies.yaml").read_text())
    studies["user_inference"]["seed"] += 1  # another design
    (tmp_path / "studies.yaml").write_text(yaml.safe_dump(studies))
    git("add", ".")
    git("commit", "-qm", "other design")
    git("update-ref", "refs/exps/ab/cd/user-inference-l10-s1", "HEAD")
    shutil.copy(ROOT / "studies.yaml", tmp_path / "studies.yaml")  # today's design in the workspace
    design = load(UserInferenceStudyParams, "user_inference", tmp_path / "params.yaml",
                  read_params(tmp_path / "params.yaml"))
    with pytest.raises(ConfigError, match="experiment user-inference-l10-s1: ran under another"):
        table(tmp_path, design, Path("reports/user_inference"))
