"""Lineage: each stage of the audit's chain as dvc.lock records it."""
from __future__ import annotations

from ...shared.core import lineage as lin
from ...shared.core.formatting import Table
from ..inputs import Inputs
from ..render import Section


def _short(md5: str | None) -> str:
    return (md5 or "?")[:8]


def lineage_section(inp: Inputs) -> Section:
    lt = Table(["stage", "params read", "inputs (path: md5)", "outputs (path: md5)"])
    for s in ["audit"] + lin.upstream(inp.lock, "audit"):
        rec = lin.stage_record(inp.lock, s)
        if rec is None:
            continue
        params = ", ".join(f"{k}" for k in rec["params"]) or "–"
        lt.rows.append([s, params, "; ".join(f"{d['path']}: {_short(d['md5'])}" for d in rec["deps"]),
                        "; ".join(f"{o['path']}: {_short(o['md5'])}" for o in rec["outs"])])
    return Section("Lineage", tables=[lt], paragraphs=[
        "Every number above is in `reports/metrics.json` (written by the `audit` stage); "
        "`reports/lineage.json` maps each of its JSON paths to the producing stage, the md5 of that stage's "
        "inputs and its params as recorded in dvc.lock, the upstream stages and the git commit. "
        "The table lists each stage in the chain as dvc.lock records it (md5 prefixes; `.dir` = directory)."])
