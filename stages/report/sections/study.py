"""The audit design study (reports/audit_study/study.json, flows/audit_study.py): development and confirmation
rows, recipe sensitivity."""
from __future__ import annotations

import json
from pathlib import Path

from ...core.formatting import Table
from ..headline import optimizer_label
from ..render import Section


def study_section(study_dir: Path | None, threats: dict[str, str] | None = None) -> Section | None:
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
    pooled = pooled_table(study_dir)
    if pooled:
        tables.append(pooled)
    p = data["committed_primary"]
    return Section("Audit design study", tables=tables, paragraphs=[
        "Which auditor choices (score × guessing rule) and which (q, T) of our own demonstration DP profile, at the "
        "same compute and ε, let the one-run test prove what the run's ceiling allows (python -m flows.audit_study; "
        "reports/audit_study/). Development rows (seeds used while choosing) are uncorrected looks, not claims; the "
        "design was then committed to params.yaml "
        f"(primary: `{p['attack']}` on `{p['kind']}`, k₊={p['k_pos']}, k₋={p['k_neg']}; threat model: "
        f"{(threats or {}).get(p['attack'], '?')}) and confirmed on seeds no earlier experiment used. "
        "The ideal is the median "
        "of a heuristic simulation of an ideal white-box statistic under the linear model, which a valid audit can "
        "exceed. Recipe rows (optimizer, learning rate, clip norm) are the user's choices: reported, never tuned. "
        "Pooled rows (reports/audit_study/pooled.json, python -m flows.pooled_audit): every pooled test ever "
        "recorded, each with the commit since which its design was unchanged (`design commit`), since which its "
        "seeds stood as preregistered (`seeds registered`; not recorded for the first set) and the commit its "
        "runs were reproduced at; a confirmation row's seeds were all preregistered; the bar is the median over "
        "every confirmation row, never a chosen one."])


def pooled_table(study_dir: Path) -> Table | None:
    f = study_dir / "pooled.json"
    if not f.is_file():
        return None
    t = Table(["phase", "recipe", "optimizer", "seeds", "m", "right of guesses", "ε̂95 (Steinke)", "GDP ε̂95",
               "own-curve ε̂95", "ideal median", "percentile in ideal", "accountant ε", "design commit",
               "seeds registered", "runs at commit"])
    for r in json.loads(f.read_text())["rows"]:
        t.rows.append([r["phase"], r["recipe"], optimizer_label(r), ", ".join(map(str, r["seeds"])), r["m"],
                       f"{r['v']} of {r['r']}", r["eps_lb_95"], r["gdp_eps_lb_95"], r["curve_eps_lb_95"],
                       r["ideal_eps_lb_95_median"], r["ideal_percentile"], r["accountant_epsilon"],
                       r["design_commit"][:10], (r.get("seeds_commit") or "not recorded")[:10],
                       r["params_commit"][:10] + (f" (experiment {r['experiment']})" if r.get("experiment") else "")])
    return t
