"""Record the pooled tests of the reproduced pipeline in reports/audit_study/pooled.json (git-tracked), with the
evidence that the design existed before the runs: the commit since which params.yaml has held the pooled design
unchanged (``design_commit``), the commit the runs were reproduced at, a hash of the resolved params and a copy of
dvc.lock (reports/audit_study/locks/).

    leakaudit run && python -m flows.pooled_audit    # then commit reports/audit_study/ with the dvc.lock it names

Refuses while params.yaml or dvc.lock differ from the commit, or while `dvc status` finds the audit stale; never
rewrites a recorded (recipe, seeds) row. A row whose seeds are all preregistered is a confirmation set; otherwise a
development look. The flow only orchestrates: rows come from ``stages.audit.api``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
from pathlib import Path

import yaml

from flows.sweep import _dvc
from stages.audit.api import pooled_row, pooled_summary
from stages.audit.params import AuditParams
from stages.core.errors import ConfigError
from stages.core.params import load, read_params, section_of

POOLED_FILE = "pooled.json"
#: the params keys that make up a recipe's pooled design (with runs.<recipe>)
DESIGN_KEYS = ("audit.pooled", "audit.primary", "audit.seeds", "replicas", "canaries", "finetune")


def _git(args: list[str], repo: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def design_of(raw: dict, recipe: str) -> dict:
    return {**{k: section_of(raw, k) for k in DESIGN_KEYS}, "run": section_of(raw, f"runs.{recipe}")}


def design_commit(repo: str, recipe: str) -> str:
    """The oldest commit since which params.yaml's pooled design of ``recipe`` has not changed."""
    head = design_of(yaml.safe_load(_git(["show", "HEAD:params.yaml"], repo)), recipe)
    found = _git(["rev-parse", "HEAD"], repo).strip()
    for commit in _git(["log", "--format=%H", "--", "params.yaml"], repo).split():
        try:
            raw = yaml.safe_load(_git(["show", f"{commit}:params.yaml"], repo))
        except subprocess.CalledProcessError:
            break
        if design_of(raw, recipe) != head:
            break
        found = commit
    return found


def record(repo: str = ".") -> list[dict]:
    repo = str(Path(repo).resolve())
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "params.yaml", "dvc.lock"], cwd=repo).returncode:
        raise ConfigError("params.yaml, dvc.lock: commit the reproduced state before recording its pooled tests")
    status = _dvc(["status", "audit"], repo)
    if "up to date" not in status:
        raise ConfigError("dvc.lock: the audit is stale (`dvc repro` first): " + status.strip().splitlines()[0])
    raw = read_params(Path(repo) / "params.yaml")
    params = load(AuditParams, "audit", Path(repo) / "params.yaml", raw)
    metrics = json.loads((Path(repo) / section_of(raw, "audit.out")).read_text())
    out = Path(repo) / params.study.out_dir
    f = out / POOLED_FILE
    rows = json.loads(f.read_text())["rows"] if f.is_file() else []
    head = _git(["rev-parse", "HEAD"], repo).strip()
    digest = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()
    new = []
    for recipe, pooled in (metrics.get("pooled") or {}).items():
        if any(r["recipe"] == recipe and r["seeds"] == pooled["seeds"] for r in rows):
            raise ConfigError(f"{f}: {recipe} at seeds {pooled['seeds']} is already recorded (rows are never "
                              "rewritten)")
        lock = f"locks/{recipe}-s{'-'.join(map(str, pooled['seeds']))}.lock"
        (out / "locks").mkdir(parents=True, exist_ok=True)
        (out / lock).write_text((Path(repo) / "dvc.lock").read_text())
        new.append(pooled_row(pooled, design_commit=design_commit(repo, recipe), params_commit=head,
                              params_sha256=digest, lock=lock))
    rows += new
    tmp = out / f".{POOLED_FILE}.tmp"
    tmp.write_text(json.dumps({"rows": rows, "summary": pooled_summary(rows)}, indent=1))
    tmp.replace(f)
    return new


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    args = ap.parse_args(argv)
    for row in record(args.repo):
        print(f"{row['phase']}: {row['recipe']} over {len(row['runs'])} runs (seeds {row['seeds']}): {row['v']} of "
              f"{row['r']} right, eps-hat95 {row['eps_lb_95']:.3f} (design since {row['design_commit'][:10]})")


if __name__ == "__main__":
    main()
