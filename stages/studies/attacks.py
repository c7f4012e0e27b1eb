"""The attack-strength table (docs/results.md, reports/attack_strength.json): every membership attack of a run on one
pool of items, today's family and 2026's (EZ-MIA, Min-K%++, RMIA), and how much the strongest adds over the strongest
of the 2023 family, from one experiment's metrics and scores.

Each row is the audit's own summary of the attack on that pool (``runs.<run>.attacks.<attack>.<pool>``): AUROC and
TPR at the headline FPR with their 95% bootstrap intervals, and AUROC minus the blind baseline's on the same items.
The strongest attack is picked after scoring (largest AUROC): its margin over the 2023 family's strongest is a
paired bootstrap interval of the AUROC difference on the same items (``audit.roc.paired_auroc_difference``), a
description of this pool, not a test.
"""
from __future__ import annotations

import numpy as np

from ..audit.roc import paired_auroc_difference
from ..core.formatting import Table, ci, fmt, md_table

#: the 2023 family (the attacks of issue 53's "today"); every other membership attack is newer
FAMILY_2023 = ("loss", "ref_ratio", "zlib", "min_k", "user_inference", "contrast", "contrast_z", "contrast_ref",
               "whitebox")


def rows_of(run_metrics: dict, pool: str, fpr: str) -> list[dict]:
    """One row per membership attack that scored ``pool``, strongest AUROC first."""
    blind = (run_metrics.get("blind") or {}).get(pool) or {}
    out = []
    for attack, groups in run_metrics["attacks"].items():
        m = groups.get(pool)
        if not m:
            continue
        t = m["tpr_at_fpr"].get(fpr) or {}
        mb = m.get("minus_blind") or {}
        out.append({"attack": attack, "family": "2023" if attack in FAMILY_2023 else "2024-2026",
                    "members": m["members"], "non_members": m["non_members"], "auroc": m["auroc"],
                    "auroc_ci95": m.get("auroc_ci95"), "auroc_p_exact": m.get("auroc_p_exact"),
                    "tpr": t.get("value"), "tpr_ci95": t.get("ci95"), "minus_blind": mb.get("value"),
                    "minus_blind_ci95": mb.get("ci95"), "blind_flagged": bool(blind.get("flagged"))})
    return sorted(out, key=lambda r: -r["auroc"])


def margin(rows: list[dict], scores: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], n_boot: int, seed: int,
           min_per_side: int) -> dict | None:
    """The strongest attack (largest AUROC) against the strongest of the 2023 family on the same items:
    AUROC difference with a 95% paired bootstrap interval. ``scores``: attack -> (item ids, scores, members).
    None when the strongest is of the 2023 family or either has no scores."""
    best, old = rows[0], next((r for r in rows if r["family"] == "2023"), None)
    if old is None or best["family"] == "2023" or best["attack"] not in scores or old["attack"] not in scores:
        return None
    ids_a, a, y = scores[best["attack"]]
    ids_b, b, _ = scores[old["attack"]]
    order = {i: k for k, i in enumerate(ids_b)}
    b = np.asarray([b[order[i]] for i in ids_a])
    d = paired_auroc_difference(a, b, y, n_boot, seed, min_per_side)
    return {"strongest": best["attack"], "strongest_2023": old["attack"], **d}


def markdown(title: str, rows: list[dict], fpr: str, diff: dict | None) -> str:
    t = Table(["attack", "family", "members / non-members", "AUROC [95% CI]", f"TPR@{float(fpr) * 100:g}%FPR [95% CI]",
               "AUROC − blind [95% paired CI]"])
    for r in rows:
        t.rows.append([r["attack"], r["family"], f"{r['members']} / {r['non_members']}",
                       ci(r["auroc"], r["auroc_ci95"], r["auroc_p_exact"]),
                       ci(r["tpr"], r["tpr_ci95"]) if r["tpr"] is not None else "–",
                       ci(r["minus_blind"], r["minus_blind_ci95"]) if r["minus_blind"] is not None else "–"])
    text = f"### {title}\n\n{md_table(t)}\n"
    if diff:
        text += (f"\nStrongest: {diff['strongest']}, AUROC {fmt(diff['value'])} above {diff['strongest_2023']} (the "
                 f"2023 family's strongest here) [{fmt(diff['ci95'][0])}, {fmt(diff['ci95'][1])}] (95% paired "
                 "bootstrap; picked after scoring: a description, not a test).\n"
                 if diff.get("ci95") else f"\nStrongest: {diff['strongest']}, AUROC {fmt(diff['value'])} above "
                 f"{diff['strongest_2023']} (too few per side for an interval).\n")
    elif rows:
        text += f"\nStrongest: {rows[0]['attack']} (of the 2023 family).\n"
    return text
