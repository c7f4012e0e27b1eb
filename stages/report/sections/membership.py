"""Membership and user inference: per run, attack and item group, AUROC and TPR at the configured FPRs, with
the ROC and privacy-region plots."""
from __future__ import annotations

from pathlib import Path

from ...audit.schema import NON_CANARY_GROUPS, TEXT_ATTACKS, GroupMetrics, Interval, RunMetrics
from ...shared.core.formatting import Table, ci, fmt
from ..headline import zero_fp
from ..inputs import Inputs, pct
from ..plots import privacy_plot, region_points, roc_plot, roc_points
from ..render import Section
from .positive_control import null_wording


def _curves(inp: Inputs, run: str, atk: str, groups: dict[str, GroupMetrics]) -> dict:
    """group -> (fpr, tpr, auroc) from the audit's ROC artifact."""
    import numpy as np

    out = {}
    for group, m in groups.items():
        fpr, tpr = inp.roc.get((run, atk, group), ([], []))
        out[group] = (np.asarray(fpr), np.asarray(tpr), m.auroc)
    return out


def _privacy_image(inp: Inputs, run: str, r: RunMetrics, panels: dict) -> tuple[str, Path] | None:
    """The accountant's profile and the loss attack's canary ROCs in the privacy region (DP runs)."""
    pv = r.privacy
    canary = {g: c for g, c in panels.get("loss", {}).items() if g not in NON_CANARY_GROUPS}
    if not (pv.dp and pv.profile and canary and inp.bounds):
        return None
    first = inp.bounds[0]
    got = (r.audit_primary.bounds.get(first.eps_lb) if r.audit_primary else None) or 0.0
    png = inp.plots_dir / f"privacy_{run}.png"
    label = first.label
    said = "the trainer's claimed" if pv.claimed else "accountant"  # an external run's claim is not ours
    privacy_plot(pv.profile, canary, pv.epsilon_spent, pv.delta, got or None,
                 f"run {run}: {said} ε = {pv.epsilon_spent:.2f} vs audited {label} = {got:.2f}", png)
    inp.plot_data("privacy", run, region_points(pv.epsilon_spent, pv.delta, canary))
    profile = ("our accountant's profile of the trainer's claimed σ, q, T" if pv.claimed
               else "the accountant's privacy profile")
    return (f"Run {run}: {profile}, and the loss attack's ROC on canaries "
            "inside the (ε, δ) privacy region (dashed: the region at the primary test's ε̂)", png)


def roc_images(inp: Inputs, run: str, r: RunMetrics) -> tuple[list, dict]:
    """The run's ROC panels (one per membership attack) and privacy-region plot, and their dvc-plots points."""
    panels = {atk: _curves(inp, run, atk, groups) for atk, groups in r.attacks.items()}
    png = inp.plots_dir / f"roc_{run}.png"
    roc_plot(panels, f"run {run} ({r.dataset})", png)
    images = [(f"Run {run}: ROC of each membership attack (log-log), one curve per item group", png)]
    privacy = _privacy_image(inp, run, r, panels)
    return images + ([privacy] if privacy else []), {f"{run}_{atk}": roc_points(c) for atk, c in panels.items()}


def mia_section(inp: Inputs) -> Section:
    fprs, head = inp.fprs, inp.headline_fpr
    mt = Table(["run", "attack", "items", "members / non-members", "AUROC [95% CI]",
                "AUROC − blind AUROC [95% paired CI] (non-randomised pools)"]
               + [f"TPR@{pct(f)}FPR" + (" [95% CI]" if f == head else "") for f in fprs])
    images, plot_json = [], {}
    for run, r in inp.runs.items():
        rankings = r.audit_exploratory.identical_rankings if r.audit_exploratory else []
        same = {(i.kind, a): i.attacks for i in rankings for a in i.attacks}
        for atk, groups in r.attacks.items():
            for group, m in groups.items():
                names = same.get((group, atk), [atk])
                if names[0] != atk:  # ranks this group exactly like an attack already listed: reported once
                    continue
                t = m.tpr_at_fpr
                label = atk + (f" (= {', '.join(names[1:])}: identical ranking)" if len(names) > 1 else "")
                row = [run, label, group, f"{m.members} / {m.non_members}"]
                blind = (r.blind or {}).get(group)
                if blind is not None and blind.flagged:  # the numbers measure the shift, not leakage
                    mt.rows.append(row + ["INVALID: distribution shift (see Blind baselines)", "–"]
                                   + ["–"] * len(fprs))
                    continue
                mb = m.minus_blind
                mt.rows.append(row + [ci(m.auroc, m.auroc_ci95, m.auroc_p_exact),
                                      ci(mb.value, mb.ci95) if mb else "–"]
                               + [tpr_cell(t, f, head, m.non_members) for f in fprs])
        run_images, run_points = roc_images(inp, run, r)
        images += run_images
        plot_json.update(run_points)
    for name, pts in plot_json.items():
        inp.plot_data("roc", name, pts)
    tables = [mt] + ([lt] if (lt := canary_users_table(inp)).rows else [])
    left_out = [f"Left out on run {run} (attack.attacks lists them; this run cannot have them): "
                + "; ".join(f"{name}: {why}" for name, why in skipped.items()) + "."
                for run, r in inp.runs.items() if (skipped := r.attacks_skipped)]
    nulls = null_wording(inp, (*TEXT_ATTACKS, "user_inference"))
    return Section("Membership and user inference", tables=tables, images=images, paragraphs=left_out + nulls + [
        "Items: canary kinds (synthetic, randomized membership), `text` (the run's own training rows against "
        "as many held-out rows of the same dataset), `users` (held-in vs held-out users, scored on the "
        "attacker's samples that were never trained on), `canary_users` (real users with a shared substring "
        "inserted into every document, held in or out by a seeded coin; user-inference-attacks Algorithm 1). "
        "`text` and `users` are not randomised: their rows are INVALID where the blind baseline below finds a "
        "distribution shift, and their AUROC minus the blind baseline's on the same items (a paired bootstrap) is "
        "what the model adds over a model-free classifier. Intervals: 95% bootstrap over members and non-members "
        "(over users for users); a side with fewer than "
        f"{inp.metrics.audit_params.min_per_side} items gets no interval, and its AUROC the exact "
        "one-sided permutation p-value of AUROC > 0.5 instead. TPR at FPR x is the best TPR at an empirical FPR ≤ x; "
        "where a pool has fewer than 1/x non-members that FPR is 0, so the cell (marked \"(0 FP)\") is the TPR at "
        "zero false positives, not at x."])


def tpr_cell(t: dict[str, Interval], fpr: str, head: str, non_members: int) -> str:
    """One TPR@FPR cell: the headline FPR with its interval; "(0 FP)" where the pool is too small for that FPR."""
    if fpr not in t:
        return "–"
    cell = ci(t[fpr].value, t[fpr].ci95) if fpr == head else fmt(t[fpr].value)
    return cell + (" (0 FP)" if zero_fp(fpr, non_members) else "")


def canary_users_table(inp: Inputs) -> Table:
    """User inference on canary users per shared-substring length (the seed's Fig. 6, left)."""
    lt = Table(["run", "attack", "substring length (tokens)", "held-in / held-out canary users", "AUROC [95% CI]"])
    for run, r in inp.runs.items():
        for atk, per in (r.canary_users_by_length or {}).items():
            for length, m in sorted(per.items(), key=lambda kv: int(kv[0])):
                lt.rows.append([run, atk, length, f"{m.members} / {m.non_members}",
                                ci(m.auroc, m.auroc_ci95, m.auroc_p_exact) if m.auroc is not None
                                else "– (one side only)"])
    return lt
