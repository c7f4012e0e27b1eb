"""The attack-strength table (docs/results.md, reports/attack_strength.json): every membership attack of a run on one
pool of items, today's family and 2026's (EZ-MIA, Min-K%++, RMIA), and how the newer attacks' strongest compares with
the 2023 family's strongest, from one experiment's metrics and scores.

Each row is the audit's own summary of the attack on that pool (``runs.<run>.attacks.<attack>.<pool>``): AUROC and
TPR at the headline FPR with their 95% bootstrap intervals, and AUROC minus the blind baseline's on the same items.
The newer attacks' strongest and the 2023 family's strongest are picked after scoring (largest AUROC); their AUROC
difference on the same items has a paired bootstrap interval (``audit.roc.paired_auroc_difference``): a description
of this pool, not a test.
"""
from __future__ import annotations

import numpy as np

from ...audit.roc import paired_auroc_difference
from ...shared.core.formatting import Table, ci, fmt, md_table

#: the 2023 family (the attacks the strength table compares against); every other membership attack is newer
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


def margin(rows: list[dict], scores: dict[str, tuple[list, np.ndarray, np.ndarray]], n_boot: int, seed: int,
           min_per_side: int) -> dict | None:
    """The newer attacks' strongest (largest AUROC) against the 2023 family's strongest on the same items: AUROC
    difference (newer minus 2023) with a 95% paired bootstrap interval. ``scores``: attack -> (item ids, scores,
    members). None when either family is absent or lacks scores."""
    new = next((r for r in rows if r["family"] != "2023"), None)
    old = next((r for r in rows if r["family"] == "2023"), None)
    if new is None or old is None or new["attack"] not in scores or old["attack"] not in scores:
        return None
    ids_a, a, y = scores[new["attack"]]
    ids_b, b, _ = scores[old["attack"]]
    order = {i: k for k, i in enumerate(ids_b)}
    b = np.asarray([b[order[i]] for i in ids_a])
    d = paired_auroc_difference(a, b, y, n_boot, seed, min_per_side)
    return {"newer": new["attack"], "strongest_2023": old["attack"], **d}


def compared(rows: list[dict]) -> list[str]:
    """The two attacks ``margin`` compares: the newer family's strongest and the 2023 family's."""
    newer = [r["attack"] for r in rows if r["family"] != "2023"]
    older = [r["attack"] for r in rows if r["family"] == "2023"]
    return newer[:1] + older[:1]


def markdown(title: str, rows: list[dict], fpr: str, diff: dict | None) -> str:
    t = Table(["attack", "family", "members / non-members", "AUROC [95% CI]", f"TPR@{float(fpr) * 100:g}%FPR [95% CI]",
               "AUROC − blind [95% paired CI]"])
    for r in rows:
        t.rows.append([r["attack"], r["family"], f"{r['members']} / {r['non_members']}",
                       ci(r["auroc"], r["auroc_ci95"], r["auroc_p_exact"]),
                       ci(r["tpr"], r["tpr_ci95"]) if r["tpr"] is not None else "–",
                       ci(r["minus_blind"], r["minus_blind_ci95"]) if r["minus_blind"] is not None else "–"])
    text = f"### {title}\n\n{md_table(t)}\n"
    if rows:
        text += f"\nStrongest here: {rows[0]['attack']} (AUROC {fmt(rows[0]['auroc'])}; picked after scoring)."
    if diff:
        interval = (f" [{fmt(diff['ci95'][0])}, {fmt(diff['ci95'][1])}] (95% paired bootstrap)" if diff.get("ci95")
                    else " (too few per side for an interval)")
        text += (f" Newer attacks' strongest, {diff['newer']}, minus the 2023 family's, {diff['strongest_2023']}: "
                 f"AUROC {fmt(diff['value'])}{interval}; a description of this pool, not a test.")
    return text + "\n"
