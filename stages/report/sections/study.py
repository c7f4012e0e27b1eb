"""The audit design study (reports/audit_study/study.json, flows/audit_study.py): development and confirmation
rows, recipe sensitivity."""
from __future__ import annotations

import json
from pathlib import Path

from ...shared.core.formatting import Table
from ..figures import mc, optimizer_label
from ..render import Section


def study_section(study_dir: Path | None, threats: dict[str, str] | None = None) -> Section | None:
    f = study_dir / "study.json" if study_dir else None
    if not f or not f.is_file():
        return None
    data = json.loads(f.read_text())
    t = Table(["phase", "(q, T) profile", "design", "threat model", "seeds", "median ε̂95 (Steinke)",
               "median GDP ε̂95", "ideal median (heuristic)", "largest ε̂95", "accountant ε", "valid ppl"])
    for s in data["summary"]:
        t.rows.append([s["phase"], s["profile"], s["design"], s["threat_model"], len(s["seeds"]),
                       s["median_eps_lb_95"], s["median_gdp_eps_lb_95"], s["median_ideal"], s["max_eps_lb_95"],
                       s["accountant_epsilon"], s["median_valid_perplexity"]])
    tables = [t]
    recipes = [r for r in data["rows"] if r["phase"] == "recipes"]
    if recipes:
        rt = Table(["recipe (descriptive, one seed)", "(q, T) profile", "design", "right of guesses", "ε̂95",
                    "ideal median", "percentile in ideal", "valid ppl"])
        for r in recipes:
            rt.rows.append([r["recipe"], r["profile"], r["design"], f"{r['v']} of {r['r']}", r["eps_lb_95"],
                            r["ideal_eps_lb_95_median"], r.get("ideal_percentile"), r["valid_perplexity"]])
        tables.append(rt)
    tables += pooled_tables(study_dir)
    p = data["committed_primary"]
    return Section("Audit design study", tables=tables, paragraphs=[
        "Which auditor choices (score × guessing rule) and which (q, T) of our own demonstration DP profile, at the "
        "same compute and ε, let the one-run test show what the run's ceiling allows (python -m flows.audit_study; "
        "reports/audit_study/). Development rows (seeds used while choosing) are uncorrected looks, not claims; the "
        "design was then committed to params.yaml "
        f"(primary: `{p['attack']}` on `{p['kind']}`, k₊={p['k_pos']}, k₋={p['k_neg']}; threat model: "
        f"{(threats or {}).get(p['attack'], '?')}) and confirmed on seeds no earlier experiment used. "
        "The ideal is the median "
        "of a heuristic simulation of an ideal white-box statistic under the linear model, which a valid audit can "
        "exceed; a recipe row's percentile in it is where its bound falls among the ideal's simulated bounds. The "
        "study's rows took their ideal from 500 simulated trials (`audit.ceiling.trials` when they were recorded) "
        "and record no Monte Carlo error: at their rules a 500-trial ideal median has a Monte Carlo standard "
        "deviation of about 0.01 (30 replicate seeds; one count moves it 0.03–0.07), a percentile up to 2.2 points "
        "(binomial). "
        "Recipe rows (optimizer, learning rate, clip norm) are the user's choices: reported, never tuned. "
        "Pooled rows (reports/audit_study/pooled.json, python -m flows.pooled_audit): every pooled test ever "
        "recorded, each with the commit since which its design was unchanged (`design commit`), since which its "
        "seeds stood as preregistered (`seeds registered`; not recorded for the first set), the commit its "
        "runs were reproduced at and how its runs derived their random streams (`streams`: under `seed+offset "
        "(coupled)` a run's DP noise stream was seeded like the next seed's initialisation, so those sets are "
        "superseded). `status` is the seed ledger's (reports/audit_study/seed_ledger.json, written by "
        "flows/pooled_audit.py only): a set is a confirmation for exactly one design, the one its first recorded run "
        "was under, on seeds committed before that run; the same set run again under another design is a "
        "development look from then on (`recorded as`: what the row was called when recorded). The bars: one per "
        "design (recipe, design, streams), the median over that design's confirmation sets (each counted once), "
        "never a chosen one and never a median across designs. The ledger table lists every recorded run of a "
        "seed set in the order it was recorded."])


def pooled_tables(study_dir: Path) -> list[Table]:
    """pooled.json's rows, then its summary: one bar per design (``stages.tools.studies.study.pooled_summary``), then
    the
    seed ledger."""
    f = study_dir / "pooled.json"
    if not f.is_file():
        return []
    data = json.loads(f.read_text())
    t = Table(["status (seed ledger)", "recorded as", "recipe", "optimizer", "streams", "seeds", "m",
               "right of guesses", "ε̂95 (Steinke)", "GDP ε̂95", "own-curve ε̂95", "ideal median",
               "percentile in ideal", "accountant ε", "design commit", "seeds registered", "runs at commit",
               "superseded"])
    for r in data["rows"]:
        t.rows.append([r.get("ledger_status", "not in the ledger"), r["phase"], r["recipe"],
                       optimizer_label(r.get("optimizer")),
                       r.get("streams", "not recorded"),
                       ", ".join(map(str, r["seeds"])), r["m"],
                       f"{r['v']} of {r['r']}", r["eps_lb_95"], r["gdp_eps_lb_95"], r["curve_eps_lb_95"],
                       _mc(r, "ideal_eps_lb_95_median"), _mc(r, "ideal_percentile", 1), r["accountant_epsilon"],
                       (r.get("design_commit") or "?")[:10], (r.get("seeds_commit") or "")[:10] or "not recorded",
                       r["params_commit"][:10] + (f" (experiment {r['experiment']})" if r.get("experiment") else ""),
                       "yes" if r.get("superseded") else "no"])
    tables = [t]
    designs = (data.get("summary") or {}).get("designs")
    if designs:
        d = Table(["recipe", "design", "design commit", "optimizer", "canaries per run", "rule per run", "streams",
                   "confirmation sets", "bar: median ε̂95 of its confirmation sets", "superseded"])
        for g in designs:
            d.rows.append([g["recipe"], (g.get("design") or "?")[:10], (g.get("design_commit") or "?")[:10],
                           optimizer_label(g.get("optimizer")),
                           ", ".join(map(str, g["m_per_run"])), ", ".join(g["rule_per_run"]), g["streams"],
                           g["confirmation_sets"], g["median_eps_lb_95"],
                           f"yes: {g['superseded_reason']}" if g.get("superseded") else "no"])
        tables.append(d)
    return tables + ledger_tables(study_dir)


def ledger_tables(study_dir: Path) -> list[Table]:
    """The seed ledger: every recorded run of a seed set, in the order recorded (``stages.audit.ledger``)."""
    f = study_dir / "seed_ledger.json"
    if not f.is_file():
        return []
    t = Table(["#", "recipe", "seeds", "design", "design commit", "streams", "runs at commit",
               "seeds committed before", "right of guesses", "ε̂95 (Steinke)", "kept in"])
    for i, e in enumerate(json.loads(f.read_text())["entries"], 1):
        res = e.get("result") or {}
        t.rows.append([i, e["recipe"], ", ".join(map(str, e["seeds"])), e["design"][:10],
                       (e.get("design_commit") or "?")[:10], e["streams"],
                       e["params_commit"][:10] + (f" (experiment {e['experiment']})" if e.get("experiment") else ""),
                       "yes" if e["registered_before"] else "no",
                       f"{res['v']} of {res['r']}" if res else "not recorded", res.get("eps_lb_95"), e["source"]])
    return [t]


def _mc(r: dict, key: str, nd: int = 3):
    """A row's ideal figure with its Monte Carlo error (``headline.mc``)."""
    return None if r.get(key) is None else mc(r, key, nd)
