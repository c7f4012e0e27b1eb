"""What the studies' flows share about DVC experiments: a preset file's overrides, the experiments run so far (by
name), what of an experiment's commit is kept beside a git-tracked table (its params.yaml and dvc.lock: the
experiment's commit lives in the checkout that ran it, its files travel with the table), and the table's write."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from stages.shared.core import vcs
from stages.shared.core.errors import ConfigError


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


def carried(table: Path, repo: Path, found: Iterable[str], design: Any) -> list[dict]:
    """The experiments the table at ``table`` already shows whose commits this checkout lacks, as it recorded them.

    An experiment's commit lives in the checkout that ran it (a fresh clone holds no ``refs/exps``), so a table
    rebuilt elsewhere would otherwise drop the experiments run before; their params.yaml and dvc.lock are kept beside
    the table (git-tracked). Refused, naming the table: a carried experiment whose kept files are missing, or a table
    written under another design than ``design`` (today's) while it holds experiments to carry."""
    if not table.is_file():
        return []
    data = json.loads(table.read_text())
    found = set(found)
    out = [e for e in data.get("experiments", []) if e["experiment"] not in found]
    if out and data.get("design") != design:
        raise ConfigError(f"{table}: its experiments ran under another design than today's (restore that design, or "
                          f"remove them from the table)")
    for e in out:
        missing = [e[k] for k in ("params", "lock") if not (repo / e[k]).is_file()]
        if missing:
            raise ConfigError(f"{table}: experiment {e['experiment']}: its kept record {missing[0]} is missing")
    return out


def write_table(path: Path, data: dict) -> None:
    """``data`` as indented JSON at ``path``, through a temporary file (no partial table)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
