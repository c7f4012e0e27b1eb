"""main's dvc.lock is main's code's, and an edit makes exactly the stages that import it stale.

On a copy of the committed tree (no DVC cache, no outputs: a clean clone), DVC's own ``dvc status`` finds no stage
with a changed code, params or data dep (``flows.runtime.deps.stale``); outputs absent from the copy are not staleness.
Then
one module at a time is edited: a module only the self-check imports leaves every stage up to date, a module only the
report imports makes the report alone stale, and ``stages/shared/lm/scoring.py`` makes stale exactly the stages whose
command imports it (their import closure, as dvc.yaml expands them). Slow tier: each check is a `dvc status` over the
whole graph (3-7 s); CI's lock check (`python -m flows.runtime.deps --lock`) covers the first on every run."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from testkit.project import ROOT

from flows.runtime.deps import closure_files, stale

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clean_copy(tmp_path_factory):
    """The committed tree (git's files only), a git repository of its own: what a clean clone holds."""
    dest = tmp_path_factory.mktemp("clean_clone")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest


def _edited(copy, *paths: str):
    """A copy of ``copy`` with a comment appended to each of ``paths``."""
    dest = copy.parent / f"{copy.name}-{paths[0].replace('/', '_')}"
    shutil.copytree(copy, dest, symlinks=True)
    for path in paths:
        with (dest / path).open("a") as f:
            f.write("\n# an edit\n")
    return dest


def _importers(root, module: str) -> set[str]:
    """Every stage address (foreach expanded, as DVC names them) whose command imports ``module``."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {s.name for s in repo.index.stages if module in closure_files(s.cmd, root)}


def test_main_lock_matches_main_code(clean_copy):
    assert stale(clean_copy) == {}


def test_editing_the_tools_leaves_every_stage_up_to_date(clean_copy):
    """The self-check's probe, the export and the design study's rows: modules no stage imports."""
    assert stale(_edited(clean_copy, "stages/tools/selfcheck/probe.py", "stages/tools/handoff/export.py",
                         "stages/tools/studies/study.py")) == {}


def test_editing_a_report_module_makes_only_the_report_stale(clean_copy):
    got = stale(_edited(clean_copy, "stages/report/render.py"))
    assert got == {"report": ["stages/report (modified)"]}  # dvc.yaml lists the folder: all of it is imported


def test_editing_scoring_makes_exactly_its_importers_stale(clean_copy):
    edited = _edited(clean_copy, "stages/shared/lm/scoring.py")
    want = _importers(edited, "stages/shared/lm/scoring.py")
    got = stale(edited)
    assert set(got) == want
    assert {"finetune@dp_eps8", "attack@nondp", "canaries"} <= want  # the test covers real stages
    assert not want & {"base_model", "preprocess@enron", "audit", "report", "variance"}


def test_lineage_traces_a_committed_number_on_a_clean_clone(clean_copy):
    """A reviewer's first move: the pooled headline's chain from dvc.lock's hashes back to the raw files' md5, with no
    data and no DVC cache, saying which outputs the workspace lacks (``leakaudit lineage``)."""
    import json

    from leakaudit.trace import trace
    from stages.shared.core.lineage import load_lock

    t = trace("reports/metrics.json:pooled.dp_eps8.eps_lb_95", clean_copy)
    metrics = json.loads((clean_copy / "reports/metrics.json").read_text())
    assert t["value"] == metrics["pooled"]["dp_eps8"]["eps_lb_95"] and t["stage"] == "audit" and t["checked"]
    lock = load_lock(clean_copy / "dvc.lock")
    deps = {d["path"]: d["md5"] for s in lock.values() for d in s.get("deps", [])}
    assert any(r["path"].startswith("data/raw") for r in t["raw"])  # git-tracked inputs (data/references too)
    assert all(deps[r["path"]] == r["md5"] for r in t["raw"])
    chain = {s["stage"] for s in t["chain"]}
    assert {"finetune@dp_eps8", "replica_finetune@dp_eps8_r2", "canaries"} <= chain
    assert "data/models/dp_eps8" in t["not_in_workspace"]  # a clean clone holds no outputs: listed, not refused
