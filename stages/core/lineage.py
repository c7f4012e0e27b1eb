"""Lineage: map each reported number to the stage that produced it, the md5 of that stage's inputs
and outputs as recorded in dvc.lock, the params it read, the upstream chain, and the git commit.

dvc.lock is DVC's own record of what ran; nothing here re-derives it. ``verify_outputs`` checks the
file on disk still has the md5 dvc.lock recorded, so a report built from a stale or hand-edited
artifact says so instead of claiming a lineage it does not have.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from .io import file_digest


def load_lock(path: str | Path = "dvc.lock") -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        return {}
    return (yaml.safe_load(p.read_text()) or {}).get("stages", {}) or {}


def _entries(items) -> list[dict]:
    return [{"path": e["path"], "md5": e.get("md5"), "size": e.get("size"), "nfiles": e.get("nfiles")} for e in items or []]


def stage_record(lock: dict, name: str) -> dict | None:
    st = lock.get(name)
    if st is None:
        return None
    params = {}
    for _file, vals in (st.get("params") or {}).items():
        params.update(vals or {})
    return {"stage": name, "cmd": st.get("cmd"), "deps": _entries(st.get("deps")),
            "outs": _entries(st.get("outs")), "params": params}


def _inside(path: str, parent: str) -> bool:
    path, parent = path.rstrip("/"), parent.rstrip("/")
    return path == parent or path.startswith(parent + "/") or parent.startswith(path + "/")


def producers(lock: dict, name: str) -> list[str]:
    """Stages whose outputs one of ``name``'s deps is (or contains, or lies inside)."""
    st = lock.get(name) or {}
    found = []
    for dep in st.get("deps") or []:
        for other, ost in lock.items():
            if other == name or other in found:
                continue
            if any(_inside(dep["path"], out["path"]) for out in ost.get("outs") or []):
                found.append(other)
    return found


def upstream(lock: dict, name: str) -> list[str]:
    """All stages ``name`` transitively depends on, nearest first."""
    seen: list[str] = []
    frontier = [name]
    while frontier:
        nxt = []
        for s in frontier:
            for p in producers(lock, s):
                if p not in seen:
                    seen.append(p)
                    nxt.append(p)
        frontier = nxt
    return seen


def verify_outputs(lock: dict, name: str, root: Path = Path(".")) -> bool:
    """True when every single-file output of ``name`` on disk matches its dvc.lock md5."""
    rec = stage_record(lock, name)
    if rec is None:
        return False
    for out in rec["outs"]:
        p = root / out["path"]
        if out["md5"] and not out["md5"].endswith(".dir"):
            if not p.is_file() or file_digest(p) != out["md5"]:
                return False
    return True


def git_state(root: Path = Path(".")) -> dict:
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    commit = git("rev-parse", "HEAD")
    # dvc.lock and DVC's .gitignore entries are rewritten by the run itself: not "dirty" code/params
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)dvc.lock",
                 ":(exclude,glob)**/.gitignore")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}
