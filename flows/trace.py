"""One number's chain for `leakaudit lineage`: ``FILE:dotted.path`` -> the value, the stage that wrote FILE, each
stage up the chain with its params and its inputs' md5 as dvc.lock records them (raw data and code marked), and
the git commit — refused when DVC's own `dvc status` finds any stage of the chain out of date.

It reads dvc.lock through stages.core.lineage and asks DVC; it lives with the CLI, not in stages/core, because
no stage runs it (stages/core is a dependency of every stage).
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from stages.core.lineage import git_state, load_lock, producers, stage_record, upstream


def _inside(path: str, out: str) -> bool:
    """``path`` is the output ``out`` or lies inside it."""
    return path.rstrip("/") == out.rstrip("/") or path.startswith(out.rstrip("/") + "/")


def producer_of(lock: dict, path: str) -> str | None:
    """The stage whose dvc.lock outputs include ``path`` (a file, or a directory holding it)."""
    return next((name for name, st in lock.items()
                 if any(_inside(path, o["path"]) for o in st.get("outs") or [])), None)


def _flat_numbers(obj: Any, prefix: str = "") -> dict[str, float]:
    if isinstance(obj, dict):
        out: dict[str, float] = {}
        for k, v in obj.items():
            out.update(_flat_numbers(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj} if isinstance(obj, (int, float)) and not isinstance(obj, bool) else {}


def lookup(numbers: dict[str, float], dotted: str, where: str) -> float:
    """The number at ``dotted``; an unknown path raises one line listing the nearest known paths."""
    import difflib

    from stages.core.errors import ConfigError

    if dotted in numbers:
        return numbers[dotted]
    near = difflib.get_close_matches(dotted, list(numbers), n=5, cutoff=0.5)
    near += [p for p in numbers if p.startswith(dotted + ".")][: 5 - len(near)]
    raise ConfigError(f"{where}: no number at {dotted!r}" + (f"; near matches: {', '.join(near)}" if near else ""))


def stale_stages(root: Path, stages: list[str]) -> dict[str, list[str]]:
    """DVC's own verdict (``dvc status --json``): stage -> what changed, for the stages that no longer match
    dvc.lock (an input edited, an output altered or deleted, params changed without ``dvc repro``)."""
    import json

    proc = subprocess.run(["dvc", "status", "--json", *stages], cwd=root, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        from stages.core.errors import DataError

        raise DataError(f"dvc status failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    out: dict[str, list[str]] = {}
    for stage, changes in (json.loads(proc.stdout or "{}") or {}).items():
        what = []
        for change in changes if isinstance(changes, list) else [changes]:
            if isinstance(change, dict):
                for kind, entries in change.items():
                    what += [f"{path} ({state})" for path, state in (entries or {}).items()] if isinstance(
                        entries, dict) else [f"{kind}: {entries}"]
            else:
                what.append(str(change))
        out[stage] = what
    return out


def _dep_kind(lock: dict, stage: str, path: str) -> str:
    """Who made an input: the upstream stage(s) whose outputs it is, holds or lies in (a directory input such as
    data/processed holds several stages' outputs), or 'raw data' / 'code' / 'params' when no stage did."""
    makers = [n for n, st in lock.items() if n != stage and any(_inside(path, o["path"]) or _inside(o["path"], path)
                                                                for o in st.get("outs") or [])]
    if makers:
        return ", ".join(makers)
    if path.endswith((".py", ".yaml")) or path.startswith(("stages/", "flows/")):
        return "code" if not path.endswith("params.yaml") else "params"
    return "raw data"


def _chain_stages(lock: dict, stage: str, dotted: str) -> list[str]:
    """The producing stage and every stage upstream of it; a per-run number (``runs.<run>...``) follows only its
    own run's branch of a foreach (attack@<run>, finetune@<run>), as the number reads only that run's scores."""
    run = dotted.split(".")[1] if dotted.startswith("runs.") and "." in dotted[5:] else None
    prods = producers(lock, stage)
    mine = {p.split("@")[0] for p in prods if run and p.endswith("@" + run)}  # foreach stages with this run's item
    first = [p for p in prods if "@" not in p or p.split("@")[0] not in mine or p.endswith("@" + run)]
    chain = [stage]
    for p in first:
        for s in [p, *upstream(lock, p)]:
            if s not in chain:
                chain.append(s)
    return chain


def trace(target: str, root: Path = Path("."), check: bool = True) -> dict[str, Any]:
    """``FILE:dotted.path`` -> the number, the stage that wrote FILE, each stage up the chain with its params and
    its inputs' md5 from dvc.lock (marking raw data and code), and the git commit. With ``check``, refuses (one
    line) when DVC finds any stage of the chain out of date with dvc.lock."""
    import json

    from stages.core.errors import ConfigError, DataError

    file, sep, dotted = target.partition(":")
    if not sep or not dotted:
        raise ConfigError(f"{target}: expected FILE:dotted.path, e.g. reports/metrics.json:runs.nondp.privacy.steps")
    lock = load_lock(root / "dvc.lock")
    if not lock:
        raise DataError("dvc.lock: not found or empty; run `dvc repro` first")
    if not (root / file).is_file():
        raise DataError(f"{file}: not found")
    value = lookup(_flat_numbers(json.loads((root / file).read_text())), dotted, file)
    stage = producer_of(lock, file)
    if stage is None:
        raise DataError(f"{file}: no stage in dvc.lock writes it, so it has no recorded lineage")
    chain = _chain_stages(lock, stage, dotted)
    if check and (stale := stale_stages(root, chain)):
        what = "; ".join(f"{s}: {', '.join(c) or 'changed'}" for s, c in stale.items())
        raise DataError(f"workspace no longer matches dvc.lock ({what}); run `dvc repro` before tracing {dotted}")
    stages = []
    for name in chain:
        rec = stage_record(lock, name) or {"cmd": None, "params": {}, "deps": [], "outs": []}
        stages.append({"stage": name, "cmd": rec["cmd"], "params": rec["params"],
                       "deps": [{"path": d["path"], "md5": d["md5"], "from": _dep_kind(lock, name, d["path"])}
                                for d in rec["deps"]]})
    raw = sorted({(d["path"], d["md5"]) for s in stages for d in s["deps"] if d["from"] == "raw data"})
    return {"target": target, "file": file, "path": dotted, "value": value, "stage": stage, "chain": stages,
            "raw": [{"path": p, "md5": m} for p, m in raw], "git": git_state(root), "checked": check}
