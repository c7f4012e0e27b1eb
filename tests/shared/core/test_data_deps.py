"""dvc.yaml's data deps are per dataset: each stage that reads processed data or secrets depends on the folders of the
datasets and the secrets files it reads (one preprocess or secrets stage's output each), never on the whole
``preprocess.out_dir`` or ``secrets.out_dir``, so a new dataset, secrets entry or run leaves every other stage up to
date (the end-to-end check: tests/flows/test_dataset_deps_pipeline.py)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from testkit.project import ROOT

from flows.runtime.deps import replica_datasets, replica_differences, replica_listed, replica_secrets, write
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import deep_merge, load, read_params
from stages.shared.datasets import NO_SECRETS, secrets_of


def data_deps(root: Path = ROOT) -> dict[str, list[str]]:
    """stage address -> its deps that are not code, as DVC itself expands dvc.yaml."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {s.name: [d.def_path for d in s.deps if not d.def_path.startswith("stages")]
                for s in repo.index.stages}


def test_stages_depend_on_the_datasets_they_read_not_the_folder():
    raw = read_params(ROOT / "params.yaml")
    processed, secrets = raw["preprocess"]["out_dir"], raw["secrets"]["out_dir"]
    deps = data_deps()
    for stage, paths in deps.items():  # the report and the Data Docs describe every dataset: they read them all
        assert stage in ("report", "data_docs") or processed not in paths, f"{stage} depends on all of {processed}"
        assert stage == "report" or secrets not in paths, f"{stage} depends on all of {secrets}"
    can = raw["canaries"]
    assert {p for p in deps["canaries"] if p.startswith(processed)} == {
        f"{processed}/{can['corpus']}", f"{processed}/{can['users']['dataset']}"}
    for run, entry in raw["runs"].items():
        merged = deep_merge(raw["finetune"], entry or {})
        for key in ("dataset", "secrets"):
            assert (entry or {}).get(key) == merged[key], f"runs.{run} names its {key} (DVC reads the raw entry)"
        assert merged["secrets"] == secrets_of(merged["dataset"], raw)
        for stage in ("finetune", "attack"):
            assert [p for p in deps[f"{stage}@{run}"] if p.startswith(processed)] == [
                f"{processed}/{merged['dataset']}"]
            assert [p for p in deps[f"{stage}@{run}"] if p.startswith(secrets)] == [
                f"{secrets}/{merged['secrets']}.parquet"]
    for name in raw["replicas"]["sets"]:
        assert [p for p in deps[f"replica_canaries@{name}"] if p.startswith(processed)] == [
            f"{processed}/{can['corpus']}"]
        for stage in ("replica_finetune", "replica_attack"):
            assert [p for p in deps[f"{stage}@{name}"] if p.startswith(processed)] == [
                f"{processed}/{d}" for d in replica_datasets()]
            assert [p for p in deps[f"{stage}@{name}"] if p.startswith(secrets)] == [
                f"{secrets}/{n}.parquet" for n in replica_secrets()]
    assert replica_differences() == {}
    assert NO_SECRETS in {deep_merge(raw["finetune"], e or {})["secrets"] for e in raw["runs"].values()}


def test_the_replicated_runs_datasets_are_checked_and_written(tmp_path):
    """DVC's foreach over replicas.sets cannot look up a run's dataset or secrets, so flows.runtime.deps lists them: a
    replica of a run on another dataset with its own secrets is caught, and --write adds its folder and its secrets
    file to both replica stages."""
    for item in ("stages", "dvc.yaml", "params.yaml", "studies.yaml", ".dvcignore"):
        src = ROOT / item
        (shutil.copytree(src, tmp_path / item, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir()
         else shutil.copy2(src, tmp_path / item))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    raw = yaml.safe_load((tmp_path / "params.yaml").read_text())
    raw["replicas"]["sets"]["users_r2"] = {"run": "users", "seed": 4001}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    both = sorted({raw["runs"]["users"]["dataset"], *replica_datasets()})
    secrets = sorted({raw["runs"]["users"]["secrets"], *replica_secrets()})
    assert replica_datasets(tmp_path) == both and replica_secrets(tmp_path) == secrets and len(secrets) == 2
    assert set(replica_differences(tmp_path)) == {"replica_finetune", "replica_attack"}
    write(tmp_path)
    assert replica_differences(tmp_path) == {}
    lines = (tmp_path / "dvc.yaml").read_text().splitlines()
    assert replica_listed(lines) == (sorted(both * 2), sorted(secrets * 2))


def test_with_canary_users_off_their_dataset_may_be_any_preprocessed_one():
    """The canaries stage depends on canaries.users.dataset's folder either way (DVC has no optional dep), so with
    canary users off a project without a user-level dataset names its corpus there."""
    from stages.canaries.params import CanaryParams

    raw = read_params(ROOT / "params.yaml")
    raw["canaries"]["users"].update(enabled=False, dataset=raw["canaries"]["corpus"])
    assert load(CanaryParams, "canaries", raw=raw).users.dataset == raw["canaries"]["corpus"]
    raw["canaries"]["users"]["enabled"] = True
    with pytest.raises(ConfigError, match=r"canaries\.users\.dataset: must be a dataset with users"):
        load(CanaryParams, "canaries", raw=raw)
