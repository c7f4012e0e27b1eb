"""The pre-registered study of empirical-privacy-variance section 5.1 / App. E.1 at one (epsilon, delta): models
fine-tuned with different hyperparameters, every one calibrated by the accountant to the same (epsilon, delta),
each configuration trained at several fresh seeds (its own canary draw, coins, sampler and noise).

Fixed in params (``variance.study``) and committed with this code before the first of its models is trained:

* **Q1: does the audited epsilon-hat vary with the configuration?** The one confirmatory test: Kruskal-Wallis of
  the primary one-run bound ``eps_lb_95`` across the configurations' samples (the seeds), at ``alpha``. With it:
  the effect size epsilon^2_H = (H - k + 1) / (n - k), and the test's power at this size under the ideal (the
  last-iterate model's prediction for each configuration's q, T, sigma: ``stages.audit.ceiling``), a heuristic
  stated next to it. The same test of the other measures (the standardised member shift) is secondary: reported,
  with no verdict.
* **How much of it the ideal predicts**: Spearman's rho of each model's bound with its configuration's ideal
  median, with a bootstrap interval over models (descriptive).
* **Q2: is epsilon-hat aligned with empirical privacy?** Spearman's rho of ``eps_lb_95`` with utility (validation
  perplexity) and with each memorization score the models have, with bootstrap intervals over models (descriptive:
  the seed reports rho -0.13 with ACR and -0.71 with utility).
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np

from .analysis import finite_pairs, spearman_of


def kruskal(groups: Mapping[str, Sequence[float]]) -> dict:
    """Kruskal-Wallis H over the groups (scipy, tie-corrected), its p-value and epsilon^2_H."""
    from scipy.stats import kruskal as kw

    samples = [np.asarray(v, dtype=float) for v in groups.values()]
    n, k = sum(len(s) for s in samples), len(samples)
    if k < 2 or any(len(s) == 0 for s in samples):
        return {"n": n, "groups": k, "skipped": "needs at least two configurations, each with a model"}
    if len({float(x) for s in samples for x in s}) < 2:
        return {"n": n, "groups": k, "skipped": "every model scored the same"}
    res = kw(*samples)
    h = float(res.statistic)
    return {"n": n, "groups": k, "H": h, "df": k - 1, "p": float(res.pvalue),
            "epsilon_squared": (h - k + 1) / (n - k) if n > k else None}


def kruskal_power(draws: Mapping[str, np.ndarray], per_group: int, level: float, trials: int, seed: int) -> float:
    """How often the Kruskal-Wallis test rejects at ``level`` when each configuration's ``per_group`` models are
    drawn from ``draws[config]`` (samples of the model's value under the assumed model), over ``trials``."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        res = kruskal({c: rng.choice(d, size=per_group, replace=True) for c, d in draws.items()})
        hits += res.get("p") is not None and res["p"] < level
    return hits / trials


def spearman_ci(x: Sequence[float], y: Sequence[float], bootstrap: int, seed: int) -> dict:
    """Spearman's rho of paired values (``analysis.spearman_of``) with a percentile bootstrap 95% interval over the
    pairs (models)."""
    from scipy.stats import spearmanr

    res = spearman_of(x, y)
    if res["rho"] is None:
        return res
    a, b = np.array(finite_pairs(x, y)).T
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(bootstrap):
        i = rng.integers(0, len(a), len(a))
        if np.ptp(a[i]) > 0 and np.ptp(b[i]) > 0:
            boots.append(float(spearmanr(a[i], b[i]).statistic))
    ci = [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))] if boots else None
    return {**res, "ci95": ci, "bootstrap": bootstrap}


def by_config(rows: Sequence[Mapping], measure: str) -> dict[str, list[float]]:
    """config -> its models' finite values of ``measure``, in config order of first appearance."""
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        v = r.get(measure)
        if v is not None and math.isfinite(float(v)):
            out[str(r["config"])].append(float(v))
    return dict(out)


def q1(rows: Sequence[Mapping], measures: Sequence[str], alpha: float) -> dict:
    """Q1: the Kruskal-Wallis test of each measure. The first is the one confirmatory test, at ``alpha``, with its
    verdict; the others are secondary: their H, p and effect size are reported, exploratory, with no verdict."""
    out = {}
    for i, m in enumerate(measures):
        res = kruskal(by_config(rows, m))
        if i == 0:
            out[m] = {**res, "role": "primary", "level": alpha, "varies": (res["p"] < alpha) if "p" in res else None}
        else:
            out[m] = {**res, "role": "secondary (exploratory: no verdict)"}
    return out


def analyse_study(rows: Sequence[Mapping], measures: Sequence[str], q2_against: Sequence[str], alpha: float,
                  bootstrap: int, seed: int, ideal_draws: Mapping[str, np.ndarray] | None = None,
                  power_trials: int = 0) -> dict:
    """Q1 (with the power under the ideal where ``ideal_draws`` are given), the ideal's prediction and Q2, over the
    study's completed models (``rows``: one per model with its ``config``)."""
    groups = by_config(rows, measures[0])
    per_group = min((len(v) for v in groups.values()), default=0)
    out: dict = {"models": len(rows), "configurations": len(groups), "q1": q1(rows, measures, alpha)}
    if ideal_draws and per_group:
        out["q1"][measures[0]]["power_under_ideal"] = {
            "power": kruskal_power(ideal_draws, per_group, alpha, power_trials, seed),
            "per_configuration": per_group, "trials": power_trials,
            "assumption": "each model's bound drawn from its configuration's ideal one-run audit (the last-iterate "
                          "linear model at its q, T, sigma; a heuristic, not the real models' spread)"}
    first = measures[0]
    out["ideal_prediction"] = spearman_ci([r.get(first) for r in rows],
                                          [r.get(f"ideal_{first}_median") for r in rows], bootstrap, seed)
    out["q2"] = {y: spearman_ci([r.get(first) for r in rows], [r.get(y) for r in rows], bootstrap, seed)
                 for y in q2_against}
    return out


def config_summaries(rows: Sequence[Mapping], configs: Mapping, delta: float) -> list[dict]:
    """Per registered configuration: its hyperparameters (q and sigma as its models ran), how many models completed,
    the medians of each measure, and the pooled one-run test over its models (parallel composition: each model
    its own canaries, membership coins and noise, so the union of their canaries is one valid audit of the
    configuration at (epsilon, delta); m, r and v add up)."""
    from ..audit.api import epsilon_lower_bound, gdp_epsilon_lower_bound

    out = []
    for name, c in configs.items():
        done = [r for r in rows if r["config"] == name and r["status"] == "completed"]

        def med(key: str) -> float | None:
            vals = [float(r[key]) for r in done if r.get(key) is not None and math.isfinite(float(r[key]))]
            return float(np.median(vals)) if vals else None

        m, r, v = (sum(int(x[k]) for x in done) for k in ("m", "r", "v"))
        first = done[0] if done else {}
        out.append({"config": name, "batch_size": c.batch_size, "steps": c.steps, "lr": c.lr,
                    "sample_rate": first.get("sample_rate"), "noise_multiplier": first.get("noise_multiplier"),
                    "models": len(done), "seeds": [x["seed"] for x in done],
                    **{f"median_{k}": med(k) for k in ("eps_lb_95", "gdp_eps_lb_95", "member_shift",
                                                        "ideal_eps_lb_95_median", "valid_perplexity", "exposure",
                                                        "exposure_control")},
                    "pooled": {"m": m, "r": r, "v": v,
                               "eps_lb_95": epsilon_lower_bound(m, r, v, delta, 0.95) if r else None,
                               "gdp_eps_lb_95": gdp_epsilon_lower_bound(m, r, v, delta, 0.95) if r else None}})
    return out


def ideal_draws(summaries: Sequence[Mapping], m: int, rule: tuple[int, int], delta: float, trials: int,
                seed: int) -> dict[str, np.ndarray]:
    """Each configuration's ideal one-run bounds at 95%: ``trials`` audits of the last-iterate linear model
    (``stages.audit.ceiling``) at the q, T, sigma its models ran with, m canaries and the primary rule."""
    from ..audit.api import clip_guesses, ideal_counts, trial_bounds

    k_pos, k_neg = clip_guesses(*rule, m)
    out = {}
    for s in summaries:
        if s["models"] and s["sample_rate"] is not None:
            counts = ideal_counts(s["sample_rate"], s["steps"], s["noise_multiplier"], m=m, k_pos=k_pos, k_neg=k_neg,
                                  trials=trials, seed=seed)
            out[s["config"]] = trial_bounds(counts, delta, 0.95)
    return out


def study_result(study, path) -> dict:
    """The variance stage's account of the pre-registered study from its table: progress, per-configuration
    summaries and pooled tests (descriptive at any stage), and Q1 / Q2 (``analyse_study``) only once every
    registered model has run: the test is of the registered design, never of the models that happen to be done.
    The ideal's rule is the one the models were audited with (their rows), never today's params."""
    import json
    from dataclasses import asdict

    from ..core.errors import DataError
    from .schema import read_audit_points

    rows, meta = read_audit_points(path)
    rules = sorted({(r["k_pos"], r["k_neg"]) for r in rows if r["status"] == "completed"})
    if len(rules) > 1:
        raise DataError(f"{path}: models audited with different guessing rules {rules}: one study, one rule")
    rule = list(rules[0]) if rules else None
    if meta.get("study") != json.loads(json.dumps(asdict(study))):
        raise DataError(f"{path}: written for another study design than variance.study (rerun "
                        "`leakaudit variance --study` or restore the registered params)")
    registered = len(study.configs) * len(study.seeds)
    done = [r for r in rows if r["status"] == "completed"]
    out = {"table": str(path), "run": study.run, "epsilon": study.epsilon, "delta": study.delta,
           "registered": registered, "completed": len(done),
           "failed": [{"point": r["point"], "error": r["error"]} for r in rows if r["status"] != "completed"],
           "pending": registered - len(rows), "rule": rule, "measures": list(study.measures),
           "q2_against": list(study.q2_against), "alpha": study.alpha,
           "models": [{k: r[k] for k in ("point", "config", "seed", "rev", "status", "eps_lb_95", "gdp_eps_lb_95",
                                         "member_shift", "ideal_eps_lb_95_median", "valid_perplexity", "exposure",
                                         "accountant_epsilon")} for r in rows],
           "configs": config_summaries(rows, study.configs, study.delta)}
    if out["pending"] or not done:
        out["analysis"] = None
        out["withheld"] = (f"{out['pending']} of {registered} registered models have not run yet: Q1 and Q2 are "
                           "computed once every registered model has run (the test is of the registered design)")
        return out
    m = int(np.median([r["m"] for r in done]))
    draws = ideal_draws(out["configs"], m, tuple(rule), study.delta, study.power_trials, study.seed) \
        if study.power_trials else None
    out["analysis"] = analyse_study(done, study.measures, study.q2_against, study.alpha, study.bootstrap,
                                    study.seed, draws, study.power_trials)
    return out
