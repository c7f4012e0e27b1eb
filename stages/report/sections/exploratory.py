"""The exploratory audit family: every attack × kind × guess count, Bonferroni-corrected, never a headline."""
from __future__ import annotations

from ...shared.core.formatting import Table, fmt
from ..inputs import Inputs
from ..render import Section


def exploratory_section(inp: Inputs) -> Section | None:
    bounds = inp.bounds
    tables, paras = [], []
    for run, r in inp.runs.items():
        e = r.audit_exploratory
        if e is None:
            continue
        t = Table([f"{run}: attack (same ranking)", "kind", "k₊", "k₋", "right of guesses"]
                  + [f"{b.label} corrected" for b in bounds])
        for x in e.tests:
            t.rows.append([x.attack + (f" (= {', '.join(x.same_ranking)})" if x.same_ranking else ""),
                           x.kind, x.k_pos, x.k_neg, f"{x.v} of {x.r}"]
                          + [x.bounds.get(b.eps_lb) for b in bounds])
        tables.append(t)
        same = "; ".join(f"{', '.join(i.attacks)} on {i.kind}" for i in e.identical_rankings)
        best = e.best.get(bounds[0].eps_lb) if bounds else None
        value, attack, kind, k_pos, k_neg = ((best.value, best.attack, best.kind, best.k_pos, best.k_neg) if best
                                             else (None,) * 5)
        paras.append(
            f"{run}: family of N = {e.family_size} distinct tests, each at confidence "
            + ", ".join(f"{v:.5f}" for v in e.per_test_confidence.values())
            + f" (Bonferroni), so the largest corrected {bounds[0].label} — {fmt(value)} "
            f"({attack} on {kind}, k₊={k_pos}, k₋={k_neg}) — holds "
            "at the stated family-wise confidence."
            + (f" Identical rankings, counted once: {same}." if same else ""))
    if not tables:
        return None
    return Section("Exploratory audit family (Bonferroni-corrected, never a headline)", tables=tables, paragraphs=[
        "Every membership attack × canary kind × (k₊, k₋) of `audit.exploratory`. Attacks that rank a kind's "
        "canaries identically make the same guesses for every k and are one test (zlib and min-k on one-token "
        "secrets rank exactly like loss). The correction is the price of looking at many tests: the bound's δ term "
        "(up to 2mδ) puts a floor under its p-value, so at a per-test level 1 − (1 − c)/N close to 1 even "
        "all-correct guesses support only a small ε, or none."] + paras)
