"""What the studies' flows share about DVC experiments: a preset file's overrides, the experiments run so far (by
name), what of an experiment's commit is kept beside a git-tracked table (its params.yaml and dvc.lock: the
experiment's commit lives in the checkout that ran it, its files travel with the table), and the table's write."""
from __future__ import annotations

import json
from pathlib import Path

from stages.core import vcs


def preset_lines(repo: Path, preset: str) -> list[str]:
    """A preset file's Hydra overrides in order, one per line (comments and blank lines left out)."""
    return [ln.strip() for ln in (repo / preset).read_text().splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")]


def experiment_commits(repo: Path, prefix: str = "") -> dict[str, str]:
    """name -> newest commit of every DVC experiment (``refs/exps/...``; `dvc exp list` shows them) whose name starts
    with ``prefix``."""
    out: dict[str, str] = {}
    for line in vcs.git(repo, "for-each-ref", "--sort=committerdate", "--format=%(objectname) %(refname)",
                        "refs/exps").splitlines():
        sha, ref = line.split()
        name = ref.rsplit("/", 1)[-1]
        if name.startswith(prefix):
            out[name] = sha  # in commit-date order: the newest of a name last
    return out


def keep_records(repo: Path, rev: str, name: str, records: Path) -> tuple[str, dict[str, str]]:
    """The experiment's params.yaml text, after writing it and its dvc.lock to ``records`` (relative to ``repo``) as
    ``<name>.params.yaml`` and ``<name>.dvc.lock``; and those two paths."""
    params_text = vcs.git(repo, "show", f"{rev}:params.yaml")
    (repo / records).mkdir(parents=True, exist_ok=True)
    kept = {"params": records / f"{name}.params.yaml", "lock": records / f"{name}.dvc.lock"}
    (repo / kept["params"]).write_text(params_text)
    (repo / kept["lock"]).write_text(vcs.git(repo, "show", f"{rev}:dvc.lock"))
    return params_text, {k: str(v) for k, v in kept.items()}


def write_table(path: Path, data: dict) -> None:
    """``data`` as indented JSON at ``path``, through a temporary file (no partial table)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
