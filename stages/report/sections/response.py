"""Canary response: the member signal per number of steps that sampled a canary, and the canaries' gradient
diagnostics (``runs.<run>.canary_response`` of metrics.json; ``canary_gradients`` of each run's auditor-only
auditor.json, labelled so)."""
from __future__ import annotations

from ...audit.schema import ResponseBin, RunMetrics
from ...finetune.schema import AuditorRecord
from ...shared.core.formatting import Table, fmt
from ..render import Section


def _cell(b: ResponseBin) -> str:
    if b.mean_z is None:
        return "–"
    lo_hi = b.ci95
    return f"{fmt(b.mean_z)} [{fmt(lo_hi[0])}, {fmt(lo_hi[1])}]" if lo_hi else fmt(b.mean_z)


def response_section(runs: dict[str, RunMetrics],
                     auditor: dict[str, AuditorRecord] | None = None) -> Section | None:
    """``runs``: the metrics' runs (``Inputs.runs``); ``auditor``: run -> its auditor.json (member-only statistics,
    shown labelled as the auditor's)."""
    tables, paras = [], []
    for run, r in runs.items():
        resp = r.canary_response
        if resp is None:
            continue
        attacks = list(resp.attacks)
        dp = resp.ideal_model is not None
        t = Table(["run", "steps that sampled the canary", "canaries", *[f"{a}: mean z [95% CI]" for a in attacks],
                   *(["ideal canary z (linear model)"] if dp else [])])
        first = resp.attacks[attacks[0]].bins
        for b in resp.bins:
            t.rows.append([run, b, first[b].canaries, *[_cell(resp.attacks[a].bins[b]) for a in attacks],
                           *([fmt(first[b].ideal_z)] if dp else [])])
        t.rows.append([run, "z per inclusion (slope over members)", "",
                       *[fmt(resp.attacks[a].z_per_inclusion) for a in attacks],
                       *([fmt(resp.attacks[attacks[0]].ideal_z_per_inclusion)] if dp else [])])
        tables.append(t)
        own = (auditor or {}).get(run)
        g = own.canary_gradients if own is not None else None
        if g:
            gt = Table(["run (auditor-only: its auditor.json)", "kind", "canaries measured",
                        "gradient norm median [p10, p90]", "clip norm", "share clipped",
                        "share of ‖g‖² in own rows (median, p10)"])
            for kind, d in g.items():
                gt.rows.append([run, kind, d["canaries"], f"{fmt(d['norm_median'])} [{fmt(d['norm_p10'])}, "
                                f"{fmt(d['norm_p90'])}]", d["clip_norm"], d["clipped_share"],
                                f"{fmt(d['own_rows_share_median'])}, {fmt(d['own_rows_share_p10'])}"])
            tables.append(gt)
    if not tables:
        return None
    paras.append(
        "Why the audit shows what it shows. The canaries of the primary kind are binned by how many steps' Poisson "
        "batches sampled them (the fine-tune's auditor-side record; 0 = non-members and members never drawn). Each "
        "score is in units of the non-members' standard deviation (z). Under the linear last-iterate model an ideal "
        "canary sampled k times sits k / (√T σ) null standard deviations up (last column; a heuristic): a score far "
        "below that line is losing signal in the score, the optimizer or the clipping. The gradient table, measured "
        "at the initial model, says how far above the clip norm a canary's gradient is and how much of it lies in "
        "the secret token's own rows, the coordinates the contrast and white-box scores read. It is auditor-only: "
        "measured on member canaries, it is a member statistic the accountant does not cover (the run's auditor.json, "
        "never in metrics.json or a released model).")
    return Section("Canary response: where the member signal goes", tables=tables, paragraphs=paras)
