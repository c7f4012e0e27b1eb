"""Wall time of the stages a code change reran, old commit against new, in one run on this machine.

For each commit a git worktree is made under a scratch dir, the upstream artifacts of this checkout (base model,
processed data, secrets, canaries: unchanged in cost by the change being timed) are copied in, and the downstream
stage commands of dvc.yaml run one after the other at that commit's own params.yaml, each timed. The two commits run
back to back (stages depend on each other, so they cannot alternate); run it with nothing else on the machine.
Prints one JSON object: seconds per stage and commit, totals and the ratio new / old.

    python benchmarks/repro_time.py OLD_COMMIT [NEW_COMMIT] [--stages finetune attack audit report] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

UPSTREAM = ["data/processed", "data/secrets", "data/canaries", "data/raw"]


def stage_commands(tree: Path, families: list[str]) -> list[tuple[str, str]]:
    """(stage name, command) in dvc.yaml order for the stage families asked, foreach expanded over runs."""
    spec = yaml.safe_load((tree / "dvc.yaml").read_text())
    params = yaml.safe_load((tree / "params.yaml").read_text())
    out = []
    for name, st in spec["stages"].items():
        if name not in families:
            continue
        if "foreach" in st:
            keys = params["runs"] if st["foreach"] == "${runs}" else st["foreach"]
            for key in keys:
                out.append((f"{name}@{key}", st["do"]["cmd"].replace("${key}", key)))
        else:
            out.append((name, st["cmd"]))
    return out


def base_model_dir(root: Path) -> str:
    return yaml.safe_load((root / "params.yaml").read_text())["model"]["out"]


def run_commit(root: Path, commit: str, scratch: Path, families: list[str],
               only: list[str] | None) -> dict[str, float]:
    tree = scratch / commit[:8]
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=root, check=True,
                   capture_output=True)
    try:
        for rel in [*UPSTREAM, base_model_dir(root)]:
            if (root / rel).is_dir():
                shutil.copytree(root / rel, tree / rel, dirs_exist_ok=True)
        seconds = {}
        for name, cmd in stage_commands(tree, families):
            if only and name not in only:
                continue
            t0 = time.perf_counter()
            done = subprocess.run(cmd, shell=True, cwd=tree, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": str(tree)})
            seconds[name] = round(time.perf_counter() - t0, 1)
            if done.returncode:
                sys.exit(f"{commit[:8]} {name}: exit {done.returncode}\n{done.stderr[-2000:]}")
            print(f"{commit[:8]} {name}: {seconds[name]} s", file=sys.stderr, flush=True)
        return seconds
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=root, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("commits", nargs="+", help="OLD [NEW]: one commit alone is timed alone")
    ap.add_argument("--stages", nargs="+", default=["finetune", "attack", "audit", "report"])
    ap.add_argument("--only", nargs="+", help="only these stage names (e.g. finetune@dp_eps8 audit), in dvc.yaml order")
    a = ap.parse_args()
    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                               check=True).stdout.strip())
    with tempfile.TemporaryDirectory() as scratch:
        res = {c: run_commit(root, c, Path(scratch), a.stages, a.only) for c in a.commits}
    totals = {c: round(sum(s.values()), 1) for c, s in res.items()}
    out = {"seconds": res, "total_seconds": totals}
    if len(a.commits) == 2:
        out["new_over_old"] = round(totals[a.commits[1]] / totals[a.commits[0]], 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
