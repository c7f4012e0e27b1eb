"""Report sections that explain the audit's numbers: the canary response and gradient diagnostics of each run
(``runs.<run>.canary_response`` / ``canary_gradients`` of metrics.json), and the audit design study
(reports/audit_study/study.json: development and confirmation rows, recipe sensitivity)."""
from __future__ import annotations

import json
from pathlib import Path

from ..audit.schema import THREAT
from .render import Section, Table, fmt


def _cell(b: dict) -> str:
    if b["mean_z"] is None:
        return "–"
    lo_hi = b.get("ci95")
    return f"{fmt(b['mean_z'])} [{fmt(lo_hi[0])}, {fmt(lo_hi[1])}]" if lo_hi else fmt(b["mean_z"])


def response_section(runs: dict) -> Section | None:
    tables, paras = [], []
    for run, r in runs.items():
        resp = r.get("canary_response")
        if not resp:
            continue
        attacks = list(resp["attacks"])
        dp = resp["ideal_model"] is not None
        t = Table(["run", "steps that sampled the canary", "canaries", *[f"{a}: mean z [95% CI]" for a in attacks],
                   *(["ideal canary z (linear model)"] if dp else [])])
        first = resp["attacks"][attacks[0]]["bins"]
        for b in resp["bins"]:
            t.rows.append([run, b, first[b]["canaries"], *[_cell(resp["attacks"][a]["bins"][b]) for a in attacks],
                           *([fmt(first[b]["ideal_z"])] if dp else [])])
        t.rows.append([run, "z per inclusion (slope over members)", "",
                       *[fmt(resp["attacks"][a]["z_per_inclusion"]) for a in attacks],
                       *([fmt(resp["attacks"][attacks[0]]["ideal_z_per_inclusion"])] if dp else [])])
        tables.append(t)
        g = r.get("canary_gradients")
        if g:
            gt = Table(["run", "kind", "canaries measured", "gradient norm median [p10, p90]", "clip norm",
                        "share clipped", "share of ‖g‖² in own rows (median, p10)"])
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
        "the secret token's own rows, the coordinates the contrast and white-box scores read.")
    return Section("Canary response: where the member signal goes", tables=tables, paragraphs=paras)


def study_section(study_dir: Path | None) -> Section | None:
    f = study_dir / "study.json" if study_dir else None
    if not f or not f.is_file():
        return None
    data = json.loads(f.read_text())
    t = Table(["phase", "(q, T) profile", "design", "threat model", "seeds", "median ε̂95 (Steinke)",
               "median GDP ε̂95", "ideal median (heuristic)", "median ÷ ideal", "largest ε̂95", "accountant ε",
               "valid ppl"])
    for s in data["summary"]:
        t.rows.append([s["phase"], s["profile"], s["design"], s["threat_model"], len(s["seeds"]),
                       s["median_eps_lb_95"], s["median_gdp_eps_lb_95"], s["median_ideal"], s["median_over_ideal"],
                       s["max_eps_lb_95"], s["accountant_epsilon"], s["median_valid_perplexity"]])
    tables = [t]
    recipes = [r for r in data["rows"] if r["phase"] == "recipes"]
    if recipes:
        rt = Table(["recipe (descriptive, one seed)", "(q, T) profile", "design", "right of guesses", "ε̂95",
                    "ideal median", "efficiency", "valid ppl"])
        for r in recipes:
            rt.rows.append([r["recipe"], r["profile"], r["design"], f"{r['v']} of {r['r']}", r["eps_lb_95"],
                            r["ideal_eps_lb_95_median"], r["efficiency_95"], r["valid_perplexity"]])
        tables.append(rt)
    p = data["committed_primary"]
    return Section("Audit design study", tables=tables, paragraphs=[
        "Which auditor choices (score × guessing rule) and which (q, T) of our own demonstration DP profile, at the "
        "same compute and ε, let the one-run test prove what the run's ceiling allows (python -m flows.audit_study; "
        "reports/audit_study/). Development rows (seeds used while choosing) are uncorrected looks, not claims; the "
        "design was then committed to params.yaml "
        f"(primary: `{p['attack']}` on `{p['kind']}`, k₊={p['k_pos']}, k₋={p['k_neg']}; threat model: "
        f"{THREAT.get(p['attack'], '?')}) and confirmed on seeds no earlier experiment used. The ideal is the median "
        "of a heuristic simulation of an ideal white-box statistic under the linear model, which a valid audit can "
        "exceed. Recipe rows (optimizer, learning rate, clip norm) are the user's choices: reported, never tuned."])
