"""The project as the tests use it: its root and params (with overrides), a copy of it as a fresh git + DVC checkout
(and a copy of such a copy, cache included), params shrunk for the tiny models, the tiny project's stage names, and
running a command in a project."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def project_raw() -> dict:
    """The project's params.yaml, parsed."""
    from stages.shared.core.params import read_params

    return read_params(ROOT / "params.yaml")


def params(cls: type, section: str, **overrides: Any):
    """``cls`` built from the project's params.yaml at the dotted ``section``, with ``overrides`` deep-merged
    (nested dicts for nested dataclasses): tests start from the real values, as the stages do."""
    from stages.shared.core.params import build, deep_merge, section_of

    return build(cls, deep_merge(section_of(project_raw(), section), overrides), section)


def copy_project(dest: Path) -> Path:
    """A fresh git + DVC checkout of this project (code, dvc.yaml, params, vendored data)."""
    for item in ["stages", "flows", "leakaudit", "dvc.yaml", "params.yaml", "studies.yaml", ".dvcignore", ".gitignore",
                 "pyproject.toml", "data/raw",
                 "reports/sweeps", "reports/variance/points.parquet", "reports/variance/audit_points.parquet",
                 "reports/variance/silent_points.parquet", "reports/variance/silent_plan.json",
                 "reports/audit_study", "reports/selfcheck.json",
                 "reports/selfcheck_mutants.json", "reports/user_level_plan.json", "reports/user_level.json",
                 "reports/user_inference.json", "reports/positive_control.json",
                 "reports/positive_control_power.json",
                 "data/replicas/README.md", "data/references/README.md"]:
        src = ROOT / item
        if not src.exists():
            continue
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (dest / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / item)
    (dest / ".dvc").mkdir()
    shutil.copy2(ROOT / ".dvc/config", dest / ".dvc/config")
    shutil.copy2(ROOT / ".dvc/.gitignore", dest / ".dvc/.gitignore")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "fixture"]):
        subprocess.run(cmd, cwd=dest, check=True)
    return dest


def clone_project(src: Path, dest: Path) -> Path:
    """A copy of a project made by ``copy_project`` (git history, params, DVC cache and workspace outputs), so
    the copy is exactly as reproduced as ``src``: no stage reruns that would not rerun there. DVC's state
    (.dvc/tmp: hash cache keyed by inode, locks) stays behind; the copy rehashes its files once."""
    def skip(folder: str, names: list[str]) -> list[str]:
        return ["tmp"] if Path(folder) == src / ".dvc" else []

    shutil.copytree(src, dest, symlinks=True, ignore=skip)
    return dest


@dataclass(frozen=True)
class Reproduced:
    """A project after one `dvc repro` and that command's stdout."""
    path: Path
    stdout: str


# the stages of the tiny project (tiny_params' runs)
ALL_STAGES = {"base_model", "preprocess@personachat", "preprocess@tofu", "preprocess@enron", "preprocess@enron_users",
              "secrets@enron", "secrets@tofu", "no_secrets", "canaries", "audit", "variance", "data_docs", "report"} | {
    f"{stage}@{run}" for stage in ("finetune", "attack") for run in ("nondp", "dp", "users", "tofu")} | {
    f"replica_{stage}@dp_r2" for stage in ("canaries", "finetune", "attack")}


def ran(stdout: str) -> set[str]:
    """The stages a `dvc repro` ran, from its stdout."""
    return set(re.findall(r"Running stage '([^']+)'", stdout))


def without_replicas(p: dict) -> dict:
    """``p`` with no replica and no pooled test (a test that replaces the runs)."""
    p["replicas"]["sets"], p["audit"]["pooled"] = {}, {}
    return p


def tiny_params(model_dir: Path) -> dict:
    """params.yaml of the project, shrunk to run end to end in seconds on the tiny model."""
    import yaml

    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["model"]["name_or_path"] = str(model_dir)
    del p["preprocess"]["datasets"]["tofu_authors"]  # only tofu_users reads it (its layout: tests/shared/datasets)
    p["canaries"].update(num_canaries=60, prefix_length=4)
    p["canaries"]["checks"] = {"member_share_alpha": 1.0e-6}
    p["finetune"].update(steps=3, batch_size=8, physical_batch_size=8, max_text_rows=16, eval_rows=8, max_length=32)
    p["runs"] = {"nondp": {"dataset": "personachat", "secrets": "none"},
                 "dp": {"dataset": "personachat", "secrets": "none", "dp": {"enabled": True, "epsilon": 8.0}},
                 "users": {"dataset": "enron_users", "secrets": "enron", "canaries": False, "objective": "nwp",
                           "max_text_rows": 24, "steps": 3, "batch_size": 8},
                 "tofu": {"dataset": "tofu", "secrets": "tofu", "canaries": False, "max_text_rows": 40}}
    p["canaries"]["formatted"]["candidates"] = 6
    p["canaries"]["kinds"] = ["new_token", "random", "unigram", "bigram", "model_based"]
    p["canaries"]["users"].update(lengths=[1, 3], per_length=2)
    p["secrets"]["datasets"]["enron"]["max_per_kind"] = 20
    p["attack"]["batch_size"] = 32
    p["attack"]["runs"] = {"nondp": ["loss", "ref_ratio", "zlib", "min_k", "exposure", "eia", "blind"], "dp": None,
                           "users": ["loss", "min_k_pp", "ez_mia", "user_inference", "vmr", "blind"],
                           "tofu": ["loss", "air", "blind"]}
    p["attack"]["generation"].update(samples=2, max_secrets=4, air_max_new_tokens=4)
    p["attack"]["eia"].update(aux_texts=40, test_texts=10, steps=20, width=32)
    p["audit"]["primary"].update(attack="loss", k_pos=5, k_neg=5, no_dp=None, runs={})
    # one replica of dp; it also scores ref_ratio (with reference log-probabilities), so a test may move the primary
    # test to it without touching the replica
    p["replicas"].update(attacks=["loss", "ref_ratio"], reference=True, sets={"dp_r2": {"run": "dp", "seed": 3105}})
    p["audit"]["pooled"] = {"dp": {"k_pos": 5, "k_neg": 5}}
    p["audit"]["exploratory"].update(k_pos=[5, 10], k_neg=[0, 5])
    p["audit"]["ceiling"]["trials"] = 200
    p["audit"]["bootstrap"] = 20
    return p


def run(cmd: list[str], cwd: Path, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd), **(env or {})}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc
