"""One number's chain for `leakaudit lineage`: ``FILE:dotted.path`` -> the value, the stage that wrote FILE, each
stage up the chain with its params and its inputs' md5 as dvc.lock records them (raw data and code marked), and
the git commit — refused when DVC's own `dvc status` finds a code, params or raw-data dep of a stage of the chain
changed since dvc.lock; outputs absent from the workspace (a clean clone without the DVC cache) are listed, not
refused: the hashes in dvc.lock are the lineage.

The lineage itself (which stages, in what order, their records) is stages.shared.core.lineage's, the same the report's
lineage.json uses; this module adds only what the CLI needs: the number's lookup and DVC's own staleness check
(``flows.runtime.deps.dvc_changes``: `dvc status`, which no stage runs).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.runtime.deps import dvc_changes
from stages.shared.core.formatting import flatten
from stages.shared.core.lineage import chain_records, git_state, load_lock, number_chain, producer_of


def lookup(numbers: dict[str, float], dotted: str, where: str) -> float:
    """The number at ``dotted``; an unknown path raises one line listing the nearest known paths."""
    import difflib

    from stages.shared.core.errors import ConfigError

    if dotted in numbers:
        return numbers[dotted]
    near = difflib.get_close_matches(dotted, list(numbers), n=5, cutoff=0.5)
    near += [p for p in numbers if p.startswith(dotted + ".")][: 5 - len(near)]
    raise ConfigError(f"{where}: no number at {dotted!r}" + (f"; near matches: {', '.join(near)}" if near else ""))


def trace(target: str, root: Path = Path("."), check: bool = True) -> dict[str, Any]:
    """``FILE:dotted.path`` -> the number, the stage that wrote FILE, each stage up the chain with its params and
    its inputs' md5 from dvc.lock (marking raw data and code), and the git commit. With ``check``, refuses (one
    line) when DVC finds a dep of a stage of the chain changed since dvc.lock, and lists the chain's outputs that
    are not in the workspace."""
    import json

    from stages.shared.core.errors import ConfigError, DataError

    file, sep, dotted = target.partition(":")
    if not sep or not dotted:
        raise ConfigError(f"{target}: expected FILE:dotted.path, e.g. reports/metrics.json:runs.nondp.privacy.steps")
    lock = load_lock(root / "dvc.lock")
    if not lock:
        raise DataError("dvc.lock: not found or empty; run `dvc repro` first")
    if not (root / file).is_file():
        raise DataError(f"{file}: not found")
    value = lookup(flatten(json.loads((root / file).read_text()), numbers_only=True), dotted, file)
    stage = producer_of(lock, file)
    if stage is None:
        raise DataError(f"{file}: no stage in dvc.lock writes it, so it has no recorded lineage")
    chain = number_chain(lock, stage, dotted)
    missing: list[str] = []
    if check:
        try:
            changes = dvc_changes(root, chain)
        except RuntimeError as exc:
            raise DataError(str(exc)) from None
        stale = {s: c["stale"] + c["altered"] for s, c in changes.items() if c["stale"] or c["altered"]}
        if stale:
            what = "; ".join(f"{s}: {', '.join(c)}" for s, c in stale.items())
            raise DataError(f"workspace no longer matches dvc.lock ({what}); run `dvc repro` before tracing {dotted}")
        missing = sorted({p for c in changes.values() for p in c["missing"] if producer_of(lock, p) in chain})
    stages = chain_records(lock, chain)
    raw = sorted({(d["path"], d["md5"]) for s in stages for d in s["deps"] if d["from"] == "raw data"})
    return {"target": target, "file": file, "path": dotted, "value": value, "stage": stage, "chain": stages,
            "raw": [{"path": p, "md5": m} for p, m in raw], "git": git_state(root), "checked": check,
            "not_in_workspace": missing}
