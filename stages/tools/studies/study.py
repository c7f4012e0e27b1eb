"""Rows of the audit design study (reports/audit_study/study.json), from one experiment's metrics.

A design is an auditor's choice that needs no new fine-tune: a canary score (an attack) and a guessing rule
(k_pos highest "in", k_neg lowest "out"). Every design is evaluated on every trained model of the study from the
(m, r, v) counts the audit stage wrote for it (``runs.<run>.audit_exploratory.tests``), each bound *uncorrected*:
a development row is one of many looks (it informs the choice, it is no claim), and a confirmation row is the
committed design on a fresh seed, the one test that seed's run makes. Next to each: the ideal audit of the same
rule at the run's own q, T, sigma (a heuristic simulation, ``audit.ceiling.ideal_audit``), the percentile of the
measured bound among the ideal's trials (never a ratio of a bound to the ideal's median: that reads a distribution as
a number).
"""
from __future__ import annotations

import functools

import numpy as np

from ...shared.bounds.ceiling import ideal_counts, percentile_mc, trial_bounds
from ...shared.bounds.gdp import gdp_epsilon_lower_bound
from ...shared.bounds.one_run import epsilon_lower_bound

#: study.json row fields, in order
FIELDS = ("design", "score", "threat_model", "k_pos", "k_neg", "seed", "phase", "profile", "experiment", "rev",
          "run", "sample_rate", "steps", "noise_multiplier", "accountant_epsilon", "delta", "m", "r", "v",
          "eps_lb_95", "gdp_eps_lb_95", "ideal_eps_lb_95_median", "ideal_gdp_eps_lb_95_median", "ideal_percentile",
          "valid_perplexity")


def design_name(score: str, k_pos: int, k_neg: int) -> str:
    return f"{score} k+{k_pos} k-{k_neg}"


def find_test(family: dict, attack: str, kind: str, k_pos: int, k_neg: int) -> dict:
    """The exploratory test of (attack or an attack declared to rank like it, kind, k_pos, k_neg)."""
    for t in family["tests"]:
        if (attack == t["attack"] or attack in t["same_ranking"]) and (t["kind"], t["k_pos"], t["k_neg"]) == (
                kind, k_pos, k_neg):
            return t
    raise KeyError(f"no exploratory test {attack}/{kind} k_pos={k_pos} k_neg={k_neg} "
                   "(audit.exploratory must include the study's rules)")


@functools.lru_cache(maxsize=256)
def _ideal(q: float, steps: int, sigma: float, m: int, k_pos: int, k_neg: int, delta: float, trials: int,
           seed: int) -> tuple[np.ndarray, np.ndarray]:
    counts = ideal_counts(q, steps, sigma, m=m, k_pos=k_pos, k_neg=k_neg, trials=trials, seed=seed)
    return trial_bounds(counts, delta, 0.95), trial_bounds(counts, delta, 0.95, gdp=True)


def study_rows(metrics: dict, study, *, seed: int, phase: str, profile: str, experiment: str, rev: str,
               trials: int, ceiling_seed: int, threat_models: dict[str, str]) -> list[dict]:
    """One row per design (study.scores x study.rules) of ``study.run`` in one experiment's metrics.json;
    ``threat_models``: score -> the threat model its attack declares."""
    res = metrics["runs"][study.run]
    privacy = res["privacy"]
    q, T, sigma, delta = privacy["sample_rate"], privacy["steps"], privacy["noise_multiplier"], privacy["delta"]
    rows = []
    for score in study.scores:
        for k_pos, k_neg in study.rules:
            t = find_test(res["audit_exploratory"], score, study.kind, k_pos, k_neg)
            m, r, v = t["m"], t["r"], t["v"]
            eps = epsilon_lower_bound(m, r, v, delta, 0.95) if r else 0.0
            gdp = gdp_epsilon_lower_bound(m, r, v, delta, 0.95) if r else 0.0
            ideal, ideal_gdp = _ideal(q, T, sigma, m, t["k_pos"], t["k_neg"], delta, trials, ceiling_seed)
            med, med_gdp = float(np.median(ideal)), float(np.median(ideal_gdp))
            rows.append({
                "design": design_name(score, k_pos, k_neg), "score": score, "threat_model": threat_models[score],
                "k_pos": k_pos, "k_neg": k_neg, "seed": seed, "phase": phase, "profile": profile,
                "experiment": experiment, "rev": rev, "run": study.run, "sample_rate": q, "steps": T,
                "noise_multiplier": sigma, "accountant_epsilon": privacy["epsilon_spent"], "delta": delta,
                "m": m, "r": r, "v": v, "eps_lb_95": eps, "gdp_eps_lb_95": gdp,
                "ideal_eps_lb_95_median": med, "ideal_gdp_eps_lb_95_median": med_gdp,
                "ideal_percentile": percentile_mc(eps, ideal)[0],
                "valid_perplexity": res["utility"]["valid_perplexity"]})
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Per (phase, profile, design): seeds, median eps_lb_95, median ideal, largest eps_lb_95,
    the accountant's epsilon and median validation perplexity."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["phase"], r["profile"], r["design"]), []).append(r)
    out = []
    for (phase, profile, design), g in groups.items():
        eps = [r["eps_lb_95"] for r in g]
        ideal = [r["ideal_eps_lb_95_median"] for r in g]
        out.append({"phase": phase, "profile": profile, "design": design, "threat_model": g[0]["threat_model"],
                    "seeds": sorted(r["seed"] for r in g), "median_eps_lb_95": float(np.median(eps)),
                    "median_gdp_eps_lb_95": float(np.median([r["gdp_eps_lb_95"] for r in g])),
                    "median_ideal": float(np.median(ideal)),
                    "max_eps_lb_95": float(max(eps)),
                    "accountant_epsilon": float(max(r["accountant_epsilon"] for r in g)),
                    "median_valid_perplexity": float(np.median([r["valid_perplexity"] for r in g]))})
    return out


#: reports/audit_study/pooled.json row fields (one row per recorded pooled test), in order. ``phase``: the seed
#: ledger's status of the set when the row was recorded (rows recorded before the ledger: as the registry then said);
#: ``ledger_status``: the ledger's status now (re-derived whenever the file is written: a set run again under
#: another design, or a seed that became a development seed, turns it to development)
POOLED_FIELDS = ("phase", "ledger_status", "recipe", "runs", "seeds", "seed_status", "k_pos_per_run", "k_neg_per_run",
                 "m", "r", "v", "delta", "accountant_epsilon", "sample_rate", "steps", "noise_multiplier", "optimizer",
                 "streams", "eps_lb_95", "gdp_eps_lb_95", "curve_eps_lb_95", "ideal_trials", "ideal_eps_lb_95_median",
                 "ideal_eps_lb_95_median_mcse", "ideal_eps_lb_95_p10", "ideal_eps_lb_95_p90", "ideal_percentile",
                 "ideal_percentile_mcse", "single_runs", "design", "design_commit", "seeds_commit", "params_commit",
                 "experiment", "params_sha256", "lock")
#: what a single run keeps in its row (its ``ideal_percentile_mcse`` where the audit recorded one)
SINGLE_FIELDS = ("run", "seeds", "r", "v", "eps_lb_95", "ideal_percentile", "ideal_percentile_mcse")

#: the stream derivation of the rows recorded before ``stages.shared.core.seeds.DERIVATION`` existed: ``seed + offset``
#: recipes, under which a run's DP noise stream was seeded like the next seed's initialisation, so runs at consecutive
#: seeds were coupled (the pooled test assumes independent runs)
COUPLED_STREAMS = "seed+offset (coupled)"


def pooled_row(pooled: dict, *, status: str, streams: str, design: str, design_commit: str | None,
               params_commit: str, params_sha256: str, lock: str, seeds_commit: str | None = None,
               experiment: str | None = None) -> dict:
    """One pooled.json row from a recipe's ``pooled`` entry of metrics.json; ``status``: the seed ledger's status of
    the set (``stages.audit.ledger``), which is the row's phase. ``streams``: how the runs derived their random
    streams (``stages.shared.core.seeds.DERIVATION``); ``design``: the recipe's design key; ``design_commit`` /
    ``seeds_commit``: since when params.yaml held the design / listed every seed as preregistered;
    ``params_commit``: where the runs were reproduced (a DVC experiment's baseline, ``experiment`` naming it)."""
    row = {k: pooled.get(k) for k in POOLED_FIELDS if k in pooled}
    row["single_runs"] = [{k: single[k] for k in SINGLE_FIELDS if k in single} for single in pooled["single_runs"]]
    row.update(phase=status, ledger_status=status, streams=streams, design=design, design_commit=design_commit,
               seeds_commit=seeds_commit, params_commit=params_commit, experiment=experiment,
               params_sha256=params_sha256, lock=lock)
    return {k: row.get(k) for k in POOLED_FIELDS}


def same_set(row: dict, recipe: str, seeds, streams: str) -> bool:
    """One row per (recipe, seeds, streams); a set rerun under another stream derivation is a new set of runs (a row
    without ``streams`` predates the derivation: ``COUPLED_STREAMS``)."""
    return (row["recipe"], list(row["seeds"]), row.get("streams", COUPLED_STREAMS)) == (recipe, list(seeds), streams)


def design_of_row(row: dict) -> tuple:
    """A row's design: (recipe, its design key (or, for a row without one, the commit since which its design stood),
    its stream derivation)."""
    return row["recipe"], row.get("design") or row.get("design_commit"), row.get("streams", COUPLED_STREAMS)


def pooled_summary(rows: list[dict]) -> dict:
    """One bar per design (``design_of_row``), never a median across designs: the median pooled eps_lb_95 over its
    confirmation sets (rows the seed ledger calls confirmation now, ``ledger_status``; a set counted once, at its
    first row), with the optimizer, canaries per run and rule that describe it. A design whose rows are all marked
    ``superseded`` says so, with the reason."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(design_of_row(r), []).append(r)
    designs = []
    for (recipe, design, streams), g in groups.items():
        conf, seen = [], set()
        for r in g:
            if r.get("ledger_status") == "confirmation" and tuple(r["seeds"]) not in seen:
                seen.add(tuple(r["seeds"]))
                conf.append(r)
        superseded = all(r.get("superseded") for r in g)
        designs.append({
            "recipe": recipe, "design": design, "design_commit": g[0].get("design_commit"), "streams": streams,
            "optimizer": ", ".join(sorted({str(r.get("optimizer")) for r in g})),
            "m_per_run": sorted({round(r["m"] / len(r["runs"])) for r in g}),
            "rule_per_run": sorted({f"k+{r['k_pos_per_run']} k-{r['k_neg_per_run']}" for r in g}),
            "confirmation_sets": len(conf), "confirmation_seeds": [r["seeds"] for r in conf],
            "development_sets": len({tuple(r["seeds"]) for r in g} - seen),
            "median_eps_lb_95": float(np.median([r["eps_lb_95"] for r in conf])) if conf else None,
            "superseded": superseded,
            "superseded_reason": next((r.get("superseded_reason") for r in g if r.get("superseded_reason")), None)
            if superseded else None})
    return {"designs": designs, "any_above_accountant": any(r["eps_lb_95"] > r["accountant_epsilon"] for r in rows)}
