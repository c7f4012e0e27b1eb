"""Plain-text formatting shared by the report stage and the flows' tables: a table model, number formatting,
intervals, markdown tables, and flattening nested metrics to dotted paths (the lineage ids of reports/metrics.json).

Pure functions of their arguments: no I/O, no project state.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Any]] = field(default_factory=list)


def fmt(x: Any, nd: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "∞"
        return f"{x:.{nd}f}"
    return str(x)


def flatten(obj: Any, prefix: str = "", numbers_only: bool = False) -> dict:
    """Nested dicts -> {"a.b.c": leaf}; with numbers_only, only int/float leaves are kept."""
    out: dict = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k), numbers_only))
    elif not numbers_only or (isinstance(obj, (int, float)) and not isinstance(obj, bool)):
        out[prefix] = obj
    return out


def ci(v: float, lohi, p_exact: float | None = None) -> str:
    """``v [lo, hi]``; without an interval (too few on a side, audit.min_per_side) the value alone, with the exact
    permutation p-value where the audit computed one, and never brackets."""
    if lohi is None:
        return f"{fmt(v)} (too few per side for an interval" + (f"; exact p = {fmt(p_exact)})" if p_exact is not None
                                                                 else ")")
    if lohi[0] == lohi[1]:  # every resample gave the same value: an interval would claim a precision it lacks
        return f"{fmt(v)} (every resample identical: no interval)"
    return f"{fmt(v)} [{fmt(lohi[0])}, {fmt(lohi[1])}]"


def md_table(t: Table) -> str:
    esc = lambda s: fmt(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(t.headers) + " |", "|" + "---|" * len(t.headers)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in t.rows]
    return "\n".join(lines)
