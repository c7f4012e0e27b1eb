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

from .formatting import flatten
from .io import file_digest


def load_lock(path: str | Path = "dvc.lock") -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        return {}
    return (yaml.safe_load(p.read_text()) or {}).get("stages", {}) or {}


def _entries(items) -> list[dict]:
    return [{"path": e["path"], "md5": e.get("md5"), "size": e.get("size"), "nfiles": e.get("nfiles")}
            for e in items or []]


def stage_record(lock: dict, name: str) -> dict | None:
    st = lock.get(name)
    if st is None:
        return None
    params = {}
    for _file, vals in (st.get("params") or {}).items():
        params.update(vals or {})
    return {"stage": name, "cmd": st.get("cmd"), "deps": _entries(st.get("deps")),
            "outs": _entries(st.get("outs")), "params": params}


def _within(path: str, out: str) -> bool:
    """``path`` is ``out`` or lies inside it."""
    path, out = path.rstrip("/"), out.rstrip("/")
    return path == out or path.startswith(out + "/")


def _inside(path: str, parent: str) -> bool:
    """Either path is the other or lies inside it (a directory input can hold another stage's output)."""
    return _within(path, parent) or _within(parent, path)


def producer_of(lock: dict, path: str) -> str | None:
    """The stage whose dvc.lock outputs include ``path`` (a file, or a directory holding it)."""
    return next((name for name, st in lock.items()
                 if any(_within(path, o["path"]) for o in st.get("outs") or [])), None)


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


def run_of(dotted: str) -> str | None:
    """The run a metrics path belongs to: ``runs.<run>.<...>`` -> run; None for any other path."""
    return dotted.split(".")[1] if dotted.startswith("runs.") and "." in dotted[5:] else None


def number_chain(lock: dict, stage: str, dotted: str) -> list[str]:
    """``stage`` (the one that wrote the number at ``dotted``) and every stage upstream of it, nearest first. A
    per-run number (``runs.<run>...``) follows only its own run's branch of a foreach (attack@<run>, finetune@<run>),
    as it reads only that run's scores, and that branch comes first."""
    run = run_of(dotted)
    mine = lambda p: bool(run) and p.endswith("@" + run)  # noqa: E731
    prods = producers(lock, stage)
    foreach = {p.split("@")[0] for p in prods if mine(p)}  # foreach stages with this run's item
    first = [p for p in prods if "@" not in p or p.split("@")[0] not in foreach or mine(p)]
    chain = [stage]
    for p in sorted(first, key=lambda p: not mine(p)):
        for s in [p, *upstream(lock, p)]:
            if s not in chain:
                chain.append(s)
    return chain


def input_origin(lock: dict, stage: str, path: str) -> str:
    """Who made an input of ``stage``: the upstream stage(s) whose outputs it is, holds or lies in (a directory
    input such as data/processed holds several stages' outputs), or 'raw data' / 'code' / 'params' when no stage
    did."""
    makers = [n for n, st in lock.items() if n != stage and any(_inside(path, o["path"]) for o in st.get("outs") or [])]
    if makers:
        return ", ".join(makers)
    if path.endswith((".py", ".yaml")) or path.startswith(("stages/", "flows/")):
        return "code" if not path.endswith("params.yaml") else "params"
    return "raw data"


def chain_records(lock: dict, chain: list[str]) -> list[dict]:
    """Each stage of ``chain`` as dvc.lock records it: command, params read, inputs with md5 and origin."""
    out = []
    for name in chain:
        rec = stage_record(lock, name) or {"cmd": None, "params": {}, "deps": [], "outs": []}
        out.append({"stage": name, "cmd": rec["cmd"], "params": rec["params"],
                    "deps": [{"path": d["path"], "md5": d["md5"], "from": input_origin(lock, name, d["path"])}
                             for d in rec["deps"]]})
    return out


def number_lineage(metrics: dict, lock: dict, git: dict, verified: bool, stage: str = "audit") -> dict:
    """Every number of the metrics file ``stage`` writes (reports/metrics.json) -> where it came from: the stage,
    its inputs' md5, the params it read, the upstream chain (``number_chain``) and the git commit. ``planned``
    numbers come from params alone: no inputs, no upstream."""
    rec = stage_record(lock, stage) or {}
    inputs, params = {d["path"]: d["md5"] for d in rec.get("deps", [])}, rec.get("params", {})

    def entry(value, inputs: dict, upstream: list[str]) -> dict:
        return {"value": value, "stage": stage, "inputs": inputs, "params": params, "upstream": upstream,
                "git_commit": git.get("commit"), "git_dirty": git.get("dirty"), "lock_verified": verified}

    chains: dict[str | None, list[str]] = {}
    out = {}
    for path, value in flatten(metrics.get("runs", {}), "runs", numbers_only=True).items():
        run = run_of(path)
        if run not in chains:  # the stage reads this run's branch only
            chains[run] = number_chain(lock, stage, path)[1:]
        out[path] = entry(value, inputs, chains[run])
    for path, value in flatten(metrics.get("pooled") or {}, "pooled", numbers_only=True).items():
        if None not in chains:  # a pooled test reads its run and every replica of it
            chains[None] = number_chain(lock, stage, path)[1:]
        out[path] = entry(value, inputs, chains[None])
    for path, value in flatten(metrics.get("planned", {}), "planned", numbers_only=True).items():
        out[path] = entry(value, {}, [])
    return out


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
