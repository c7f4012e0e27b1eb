"""The pre-registered study of empirical-privacy-variance section 5.1 / App. E.1 at one (epsilon, delta): models
fine-tuned with different hyperparameters, every one calibrated by the accountant to the same (epsilon, delta),
each configuration trained at the same registered seeds.

**The design is blocked by seed** (a randomized complete block design: configurations x seed blocks). A seed is the
model's ``canaries.seed`` and its run ``seed`` (``grid.study_points``), so every configuration trained at one seed
shares its canary draw, membership coins, text sample and sampler / noise seed; two configurations with the same
b and T (same q, T and so sigma) even draw the same batches and noise. The models are not independent across
configurations: the analysis compares configurations within seeds and resamples whole seeds.

Fixed in params (``variance.study``) and committed with this code before the first of its models is trained:

* **Q1: does the audited epsilon-hat vary with the configuration?** Registered: Kruskal-Wallis of the primary
  one-run bound ``eps_lb_95`` across the configurations at ``alpha``, with its effect size
  eta^2_H = (H - k + 1) / (n - k) and its power under the ideal (the last-iterate model's prediction for each
  configuration's q, T, sigma: ``stages.shared.bounds.ceiling``, a heuristic). Kruskal-Wallis assumes independent
  groups,
  which a blocked design does not give; the verdict is Friedman's test across configurations within the seed blocks
  (complete blocks only; effect size Kendall's W = chi^2 / (n (k - 1))), added after the models ran; the registered
  test stays reported beside it. The same tests of the other measures (the standardised member shift) are
  secondary: reported, with no verdict.
* **How much of it the ideal predicts**: Spearman's rho of each model's bound with its configuration's ideal
  median, with a bootstrap interval over seed blocks (descriptive).
* **Residuals** (added after the models ran, exploratory): configurations that differ in q and T move the ideal
  audit itself, so a raw difference may be only what the accountant's parameters predict. Each model's bound minus
  its configuration's ideal median, tested across configurations (Friedman, Kruskal-Wallis), and each pair of
  configurations with the same q, T (so the same sigma and ideal: they differ in what the accountant does not see)
  compared on their paired seeds (Wilcoxon signed-rank).
* **Q2: is epsilon-hat aligned with empirical privacy?** Spearman's rho of ``eps_lb_95`` with utility (validation
  perplexity) and with each memorization score the models have, with bootstrap intervals over seed blocks
  (descriptive: the seed reports rho -0.13 with ACR and -0.71 with utility).
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np

from ..shared.bounds.keys import ideal_median_key
from .analysis import spearman_of

INDEPENDENT = "independent groups (the registered test; this study's groups share their seeds)"
BLOCKED = "configurations compared within seed blocks (each seed's models share canaries, coins, data and noise seed)"

#: The commits the committed study's models were trained from (``base_commit``): all before random streams were
#: derived from (seed, stream name) through one SeedSequence. Their streams are ``seed + offset``
#: (stages/shared/core/seeds.py
#: then): run s's DP-noise generator is seeded like seed s + 1's initialisation, so consecutive seed blocks share a
#: stream. A model trained from any other commit is not flagged (a rerun after the fix clears the note).
COUPLED_STREAM_COMMITS = frozenset({"e50835c2c238cc14644ab46d6861b86f53f77601",
                                    "30874843714076f70256fab4173472424aa49850",
                                    "d2b8089a89f984ea15482dcd43e49310e60299e7"})


def _finite(v) -> bool:
    return v is not None and math.isfinite(float(v))


def kruskal(groups: Mapping[str, Sequence[float]]) -> dict:
    """Kruskal-Wallis H over the groups (scipy, tie-corrected), its p-value and eta^2_H = (H - k + 1) / (n - k).
    Every value equal: H = 0, p = 1 (nothing differs)."""
    from scipy.stats import kruskal as kw

    samples = [np.asarray(v, dtype=float) for v in groups.values()]
    n, k = sum(len(s) for s in samples), len(samples)
    base = {"n": n, "groups": k, "assumes": INDEPENDENT}
    if k < 2 or any(len(s) == 0 for s in samples):
        return {**base, "skipped": "needs at least two configurations, each with a model"}
    if len({float(x) for s in samples for x in s}) < 2:
        return {**base, "H": 0.0, "df": k - 1, "p": 1.0, "eta_squared_h": None, "tied": "every model scored the same"}
    res = kw(*samples)
    h = float(res.statistic)
    return {**base, "H": h, "df": k - 1, "p": float(res.pvalue),
            "eta_squared_h": (h - k + 1) / (n - k) if n > k else None}


def by_seed(rows: Sequence[Mapping], measure: str) -> dict[int, dict[str, float]]:
    """seed -> {config: its model's finite value of ``measure``} (the blocks), seeds in order of first appearance."""
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for r in rows:
        if _finite(r.get(measure)):
            out[int(r["seed"])][str(r["config"])] = float(r[measure])
    return dict(out)


def friedman(blocks: Mapping[int, Mapping[str, float]], configs: Sequence[str] | None = None) -> dict:
    """Friedman's chi^2 (scipy, tie-corrected) across the configurations within the complete blocks (a block missing
    a configuration is dropped and named), its p-value and Kendall's W = chi^2 / (n (k - 1)). Every block tied:
    chi^2 = 0, p = 1 (nothing differs within any seed)."""
    from scipy.stats import friedmanchisquare

    configs = list(configs or dict.fromkeys(c for b in blocks.values() for c in b))
    complete = {s: b for s, b in blocks.items() if all(c in b for c in configs)}
    n, k = len(complete), len(configs)
    base = {"blocks": n, "groups": k, "n": n * k, "dropped_blocks": [s for s in blocks if s not in complete],
            "assumes": BLOCKED}
    if k < 3:
        return {**base, "skipped": "Friedman's test needs at least three configurations"}
    if n < 2:
        return {**base, "skipped": "needs at least two seeds with a model of every configuration"}
    x = np.array([[complete[s][c] for c in configs] for s in complete])
    if not np.ptp(x, axis=1).any():
        return {**base, "chi2": 0.0, "df": k - 1, "p": 1.0, "kendall_w": 0.0,
                "tied": "every seed's models scored the same"}
    res = friedmanchisquare(*x.T)
    chi2 = float(res.statistic)
    return {**base, "chi2": chi2, "df": k - 1, "p": float(res.pvalue), "kendall_w": chi2 / (n * (k - 1))}


def power_of(draws: Mapping[str, np.ndarray], per_group: int, level: float, trials: int, seed: int,
               test: str = "kruskal") -> float:
    """How often the test (``kruskal`` or ``friedman``: each of the ``per_group`` blocks one draw per configuration)
    rejects at ``level`` when each configuration's ``per_group`` models are drawn from ``draws[config]`` (samples of
    the model's value under the assumed model), over ``trials``."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        sample = {c: rng.choice(d, size=per_group, replace=True) for c, d in draws.items()}
        res = kruskal(sample) if test == "kruskal" else \
            friedman({i: {c: float(v[i]) for c, v in sample.items()} for i in range(per_group)})
        hits += res.get("p") is not None and res["p"] < level
    return hits / trials


def kruskal_power(draws: Mapping[str, np.ndarray], per_group: int, level: float, trials: int, seed: int) -> float:
    """The registered test's power (``power_of`` of Kruskal-Wallis; benchmarks/study_power.py)."""
    return power_of(draws, per_group, level, trials, seed, "kruskal")


def cluster_draw(clusters: Sequence, rng: np.random.Generator) -> np.ndarray:
    """The indices of one cluster-bootstrap draw: as many clusters as there are, drawn with replacement, each
    bringing every one of its members (with one member per cluster: the ordinary bootstrap, the same draws)."""
    labels = list(dict.fromkeys(clusters))
    members = [np.flatnonzero([c == lab for c in clusters]) for lab in labels]
    return np.concatenate([members[i] for i in rng.integers(0, len(labels), len(labels))])


def spearman_ci(x: Sequence[float], y: Sequence[float], bootstrap: int, seed: int,
                clusters: Sequence | None = None) -> dict:
    """Spearman's rho of paired values (``analysis.spearman_of``) with a percentile bootstrap 95% interval over the
    pairs or, given each pair's cluster (its seed), over the clusters: each drawn cluster brings all its pairs."""
    from scipy.stats import spearmanr

    res = spearman_of(x, y)
    if res["rho"] is None:
        return res
    keep = [i for i, (u, v) in enumerate(zip(x, y)) if _finite(u) and _finite(v)]
    a, b = np.array([float(x[i]) for i in keep]), np.array([float(y[i]) for i in keep])
    labels = [clusters[i] for i in keep] if clusters is not None else list(range(len(keep)))
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(bootstrap):
        i = cluster_draw(labels, rng)
        if np.ptp(a[i]) > 0 and np.ptp(b[i]) > 0:
            boots.append(float(spearmanr(a[i], b[i]).statistic))
    ci = [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))] if boots else None
    over = f"{len(set(labels))} seed blocks" if clusters is not None else f"{len(keep)} models"
    return {**res, "ci95": ci, "bootstrap": bootstrap, "draws_used": len(boots), "resampled": over}


def by_config(rows: Sequence[Mapping], measure: str) -> dict[str, list[float]]:
    """config -> its models' finite values of ``measure``, in config order of first appearance."""
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if _finite(r.get(measure)):
            out[str(r["config"])].append(float(r[measure]))
    return dict(out)


def q1(rows: Sequence[Mapping], measures: Sequence[str], alpha: float) -> dict:
    """Q1: Friedman's test within seed blocks and the registered Kruskal-Wallis test of each measure. The first
    measure is the confirmatory one, at ``alpha``: its verdict is Friedman's (``varies``; the registered test's
    is ``registered_varies``); the others are secondary: reported, exploratory, with no verdict."""
    out = {}
    for i, m in enumerate(measures):
        res = {"friedman": friedman(by_seed(rows, m)), "kruskal_wallis": kruskal(by_config(rows, m))}
        if i == 0:
            fr, kw = res["friedman"], res["kruskal_wallis"]
            out[m] = {**res, "role": "primary", "level": alpha, "verdict_by": "friedman",
                      "varies": (fr["p"] < alpha) if "p" in fr else None,
                      "registered_varies": (kw["p"] < alpha) if "p" in kw else None}
        else:
            out[m] = {**res, "role": "secondary (exploratory: no verdict)"}
    return out


def same_q_t_pairs(configs: Mapping) -> list[tuple[str, str]]:
    """The pairs of registered configurations with the same b and T (so the same q, T, calibrated sigma and ideal):
    they differ only in what the accountant does not see (the learning rate)."""
    names = list(configs)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
            if (configs[a].batch_size, configs[a].steps) == (configs[b].batch_size, configs[b].steps)]


def paired_wilcoxon(blocks: Mapping[int, Mapping[str, float]], a: str, b: str) -> dict:
    """Wilcoxon's signed-rank test (scipy, two-sided, zero differences dropped) of ``b - a`` over the seeds with a
    model of both; ``min_p``: the smallest p the exact test can give with this many non-zero differences
    (2^(1 - n)): at or above the level, the test cannot reject whatever the data."""
    from scipy.stats import wilcoxon

    seeds = [s for s, blk in blocks.items() if a in blk and b in blk]
    d = np.array([blocks[s][b] - blocks[s][a] for s in seeds])
    nonzero = int(np.count_nonzero(d))
    out = {"a": a, "b": b, "pairs": len(seeds), "nonzero": nonzero, "higher": int((d > 0).sum()),
           "lower": int((d < 0).sum()), "median_difference": float(np.median(d)) if len(d) else None,
           "min_p": min(1.0, 2.0 ** (1 - nonzero)) if nonzero else None}
    if not nonzero:
        return {**out, "skipped": "no seed where the two differ"}
    res = wilcoxon(d, zero_method="wilcox")
    return {**out, "statistic": float(res.statistic), "p": float(res.pvalue)}


def residual_analysis(rows: Sequence[Mapping], measure: str, pairs: Sequence[tuple[str, str]] = ()) -> dict | None:
    """Is there a difference beyond the ideal's? Each model's ``measure`` minus its configuration's ideal median
    (``ideal_<measure>_median``; rounded to 1e-9, so float noise does not rank), tested across configurations
    (Friedman within seeds, Kruskal-Wallis), and each same-(q, T) pair on its paired seeds (``paired_wilcoxon``;
    the ideal is the same for both, so the residuals' differences are the raw ones). Exploratory: added after the
    models ran, no registered level. None where the rows carry no ideal."""
    ideal = ideal_median_key(measure)
    res = [{**r, "residual": round(float(r[measure]) - float(r[ideal]), 9)} for r in rows
           if _finite(r.get(measure)) and _finite(r.get(ideal))]
    if not res:
        return None
    groups = by_config(res, "residual")
    blocks = by_seed(rows, measure)
    return {"measure": measure, "ideal": ideal, "models": len(res),
            "role": "exploratory (added after the models ran; no registered level)",
            "median_by_config": {c: float(np.median(v)) for c, v in groups.items()},
            "friedman": friedman(by_seed(res, "residual")), "kruskal_wallis": kruskal(groups),
            "same_q_t": [paired_wilcoxon(blocks, a, b) for a, b in pairs]}


def analyse_study(rows: Sequence[Mapping], measures: Sequence[str], q2_against: Sequence[str], alpha: float,
                  bootstrap: int, seed: int, ideal_draws: Mapping[str, np.ndarray] | None = None,
                  power_trials: int = 0, pairs: Sequence[tuple[str, str]] = ()) -> dict:
    """Q1 (with the power under the ideal where ``ideal_draws`` are given), the ideal's prediction, the residuals
    beyond it and Q2, over the study's completed models (``rows``: one per model with its ``config`` and ``seed``,
    the seed its block). Intervals resample whole seed blocks."""
    groups = by_config(rows, measures[0])
    per_group = min((len(v) for v in groups.values()), default=0)
    out: dict = {"models": len(rows), "configurations": len(groups),
                 "design": {"blocked_by": "seed", "blocks": sorted({int(r["seed"]) for r in rows})},
                 "q1": q1(rows, measures, alpha)}
    if ideal_draws and per_group:
        out["q1"][measures[0]]["power_under_ideal"] = {
            "friedman": power_of(ideal_draws, per_group, alpha, power_trials, seed, "friedman"),
            "kruskal_wallis": power_of(ideal_draws, per_group, alpha, power_trials, seed, "kruskal"),
            "per_configuration": per_group, "trials": power_trials,
            "assumption": "each model's bound drawn from its configuration's ideal one-run audit (the last-iterate "
                          "linear model at its q, T, sigma; a heuristic, not the real models' spread; no seed "
                          "effect, so blocking gains nothing here)"}
    first = measures[0]
    seeds = [r["seed"] for r in rows]
    x = [r.get(first) for r in rows]
    out["ideal_prediction"] = spearman_ci(x, [r.get(ideal_median_key(first)) for r in rows], bootstrap, seed, seeds)
    out["residual"] = residual_analysis(rows, first, pairs)
    out["q2"] = {y: spearman_ci(x, [r.get(y) for r in rows], bootstrap, seed, seeds) for y in q2_against}
    return out


#: a configuration's medians over its models: measure -> its key in the summary
MEDIAN_COLUMNS = {"eps_lb_95": "median_eps_lb_95", "gdp_eps_lb_95": "median_gdp_eps_lb_95",
                  "member_shift": "median_member_shift", "ideal_eps_lb_95_median": "median_ideal_eps_lb_95_median",
                  "valid_perplexity": "median_valid_perplexity", "exposure": "median_exposure",
                  "exposure_control": "median_exposure_control"}


def config_summaries(rows: Sequence[Mapping], configs: Mapping, delta: float) -> list[dict]:
    """Per registered configuration: its hyperparameters (q and sigma as its models ran), how many models completed,
    the medians of each measure, and the pooled one-run test over its models (parallel composition: each of a
    configuration's models has its own seed, so its own canaries, membership coins and noise, and the union of
    their canaries is one valid audit of the configuration at (epsilon, delta); m, r and v add up)."""
    from ..shared.bounds.gdp import gdp_epsilon_lower_bound
    from ..shared.bounds.one_run import epsilon_lower_bound

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
                    **{column: med(k) for k, column in MEDIAN_COLUMNS.items()},
                    "pooled": {"m": m, "r": r, "v": v,
                               "eps_lb_95": epsilon_lower_bound(m, r, v, delta, 0.95) if r else None,
                               "gdp_eps_lb_95": gdp_epsilon_lower_bound(m, r, v, delta, 0.95) if r else None}})
    return out


def ideal_draws(summaries: Sequence[Mapping], m: int, rule: tuple[int, int], delta: float, trials: int,
                seed: int) -> dict[str, np.ndarray]:
    """Each configuration's ideal one-run bounds at 95%: ``trials`` audits of the last-iterate linear model
    (``stages.shared.bounds.ceiling``) at the q, T, sigma its models ran with, m canaries and the primary rule."""
    from ..shared.bounds.ceiling import ideal_counts, trial_bounds
    from ..shared.bounds.keys import clip_guesses

    k_pos, k_neg = clip_guesses(*rule, m)
    out = {}
    for s in summaries:
        if s["models"] and s["sample_rate"] is not None:
            counts = ideal_counts(s["sample_rate"], s["steps"], s["noise_multiplier"], m=m, k_pos=k_pos, k_neg=k_neg,
                                  trials=trials, seed=seed)
            out[s["config"]] = trial_bounds(counts, delta, 0.95)
    return out


def registered_table(study, path, key: str) -> tuple[list[dict], list[dict], dict]:
    """A pre-registered study's table (``variance.<key>``): its rows, the completed ones, and the progress every
    account starts with (table, run, (epsilon, delta), registered / completed / failed / pending models). A table
    written for another design than the registered one is refused."""
    import json
    from dataclasses import asdict

    from ..shared.core.errors import DataError
    from .schema import read_audit_points

    rows, meta = read_audit_points(path)
    if meta.get("study") != json.loads(json.dumps(asdict(study))):
        raise DataError(f"{path}: written for another study design than variance.{key} (rerun `leakaudit variance "
                        f"--study {key}` or restore the registered params)")
    registered = len(study.configs) * len(study.seeds)
    done = [r for r in rows if r["status"] == "completed"]
    return rows, done, {
        "table": str(path), "run": study.run, "epsilon": study.epsilon, "delta": study.delta,
        "registered": registered, "completed": len(done),
        "failed": [{"point": r["point"], "error": r["error"]} for r in rows if r["status"] != "completed"],
        "pending": registered - len(rows)}


def study_result(study, path) -> dict:
    """The variance stage's account of the pre-registered study from its table: progress, per-configuration
    summaries and pooled tests (descriptive at any stage), the design (blocked by seed; the same-(q, T) pairs), the
    base commits whose random streams were coupled (``COUPLED_STREAM_COMMITS``), and Q1 / Q2 (``analyse_study``)
    only once every registered model has run: the test is of the registered design, never of the models that
    happen to be done.
    The ideal's rule is the one the models were audited with (their rows), never today's params."""
    from ..shared.core.errors import DataError

    rows, done, out = registered_table(study, path, "study")
    registered = out["registered"]
    rules = sorted({(r["k_pos"], r["k_neg"]) for r in done})
    if len(rules) > 1:
        raise DataError(f"{path}: models audited with different guessing rules {rules}: one study, one rule")
    rule = list(rules[0]) if rules else None
    out.update({"rule": rule, "measures": list(study.measures),
           "q2_against": list(study.q2_against), "alpha": study.alpha,
           "models": [{k: r[k] for k in ("point", "config", "seed", "rev", "status", "eps_lb_95", "gdp_eps_lb_95",
                                         "member_shift", "ideal_eps_lb_95_median", "valid_perplexity", "exposure",
                                         "accountant_epsilon")} for r in rows],
           "configs": config_summaries(rows, study.configs, study.delta),
           "design": {"blocked_by": "seed", "seeds": list(study.seeds), "same_q_t": same_q_t_pairs(study.configs)},
           "coupled_streams": sorted({r["base_commit"] for r in rows} & COUPLED_STREAM_COMMITS)})
    if out["pending"] or not done:
        out["analysis"] = None
        out["withheld"] = (f"{out['pending']} of {registered} registered models have not run yet: Q1 and Q2 are "
                           "computed once every registered model has run (the test is of the registered design)")
        return out
    m = int(np.median([r["m"] for r in done]))
    draws = ideal_draws(out["configs"], m, tuple(rule), study.delta, study.power_trials, study.seed) \
        if study.power_trials else None
    out["analysis"] = analyse_study(done, study.measures, study.q2_against, study.alpha, study.bootstrap,
                                    study.seed, draws, study.power_trials, out["design"]["same_q_t"])
    return out
