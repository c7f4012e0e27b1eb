"""Blind baselines: whether a non-randomised pool's membership signal is a distribution shift."""
from __future__ import annotations

from ...audit.schema import Blind, ShiftPool
from ...shared.core.formatting import Table, ci, fmt
from ..inputs import Inputs
from ..render import Section


def _what_differs(pool: Blind) -> str:
    """The length/format features that differ most (|Cohen's d| >= 0.5), or that none does."""
    big = [d for d in pool.differences if abs(d.d) >= 0.5][:3]
    if not big:
        return ("no length/format feature (|d| < 0.5): the classifier separates them on character n-grams "
                "(content)" if pool.flagged else "no length/format feature differs (|d| < 0.5)")
    return "; ".join(f"{d.feature}: members {d.members:.3g} vs non-members {d.non_members:.3g} "
                     f"(d = {d.d:+.2f})" for d in big)


def _differences_text(inp: Inputs, row: ShiftPool) -> str:
    """Per run sharing the pool: its largest model-based AUROC (the audit's pick) minus the blind AUROC, with the
    paired interval."""
    out = []
    for run, top in row.largest_model_auroc.items():
        mb = inp.runs[run].attacks[top.attack][row.group].minus_blind if top else None
        if mb:
            out.append(f"{run} ({top.attack}): {ci(mb.value, mb.ci95)}")
    return "; ".join(out) or "–"


def _verdicts_text(row: ShiftPool) -> str:
    """The pool's verdict, per run where the runs sharing it differ (their attacks differ in strength)."""
    words = {run: v.words for run, v in row.verdicts.items()}
    if len(set(words.values())) == 1:
        return next(iter(words.values()))
    return "; ".join(f"{run}: {w}" for run, w in words.items())


def blind_section(inp: Inputs) -> Section | None:
    check = inp.metrics.shift_check
    rows = check.pools
    if not rows:
        return None
    power = rows[0].power.power
    bt = Table(["pool", "runs sharing it", "members / non-members", "blind AUROC [95% CI]", "p (AUROC ≤ 0.5)",
                f"detectable blind AUROC ({power:.0%} power)",
                "largest model-based AUROC − blind [95% paired CI] (per run; attack picked after scoring)",
                "verdict", "what differs"])
    for row in rows:
        pool = inp.runs[row.runs[0]].blind[row.group]
        det = row.power.auroc
        bt.rows.append([f"{row.group} {row.pool[:8]}", ", ".join(row.runs),
                        f"{row.members} / {row.non_members}",
                        ci(row.auroc, row.auroc_ci95), f"{fmt(row.p_value)} ({row.test})",
                        fmt(det) if det is not None else "none ≤ 1 (too few items for the level)",
                        _differences_text(inp, row), _verdicts_text(row), _what_differs(pool)])
    folds = sorted({p.folds for r in inp.runs.values() for p in (r.blind or {}).values()})
    return Section("Blind baselines: is a pool's membership signal a distribution shift?", tables=[bt], paragraphs=[
        "Pools whose membership is not randomised by construction — a run's trained vs held-out text rows, held-in "
        "vs held-out users — can differ in distribution, and then a membership attack measures the difference, not "
        "leakage (Das, Zhang & Tramèr 2024; Duan et al. 2024). The blind baseline never sees the model: a "
        "logistic regression on the text alone (character 1–3-gram TF-IDF, length and format features) scored out "
        f"of fold by {'/'.join(str(k) for k in folds)}-fold stratified cross-validation. Runs that score the same "
        "rows with the same labels share one pool (one row, one test). A pool is marked INVALID when its blind AUROC "
        "is above 0.5 by a one-sided Mann-Whitney test (exact permutation distribution below "
        f"{inp.metrics.audit_params.min_per_side} items on a side) at α/N = "
        f"{check.alpha:g}/{check.family_size} (Bonferroni over the distinct pools); "
        "its membership numbers are then not shown as leakage.",
        f"The guard's power: 'detectable blind AUROC' is the smallest blind AUROC the same test flags in {power:.0%} "
        f"of {rows[0].power.trials} simulated pools of that size at that level (binormal scores, seeded; "
        "a rank test, so only the AUROC and the sizes matter). Where the largest model-based AUROC on the pool is "
        "below it, a shift as large as that attack's signal would usually go unflagged, so the verdict is 'guard too "
        "weak at this size', not 'no shift'; this compares the blind classifier's reading of a shift with the "
        "model's, an assumption rather than a guarantee. 'Largest model-based AUROC − blind' is the attack's AUROC "
        "minus the blind baseline's on the same items, from one paired stratified bootstrap: above 0, the model "
        "tells members apart better than the text alone does. 'What differs' lists length/format features only "
        "(never text). Canaries, formatted canaries, canary users and the VMR/AIR control are randomised by a "
        "seeded coin and need no baseline."])
