"""The second pre-registered study's analysis (``variance.silent``), fixed before its first model: at one (q, T,
sigma), and so one ideal audit, does what the audit finds vary with settings the accountant does not see (the
learning rate, the optimizer)?

Every model of a seed shares that seed's canary draw, membership coins, text sample, Poisson batches and noise
stream with the other settings' models of the seed (a block): each setting is compared with the base on the paired
seeds. The primary test of each setting is Wilcoxon's signed-rank test (two-sided, exact at these sizes) of its
difference from the base in the primary measure (``measure``: v, the correct "in" guesses of the primary rule),
Holm-corrected over the settings at ``alpha`` (family-wise). The secondary measures get the same tests, reported
without a verdict. The power (``power``) is stated before any model: the chance that a setting whose models
differ from the base's by ``effect`` in the primary measure is rejected, where each model's count is a draw of the
ideal audit's at the study's q, T, sigma (independent draws: pairing by seed can only add power).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .study import by_seed, paired_wilcoxon, registered_table


def holm(pvalues: Mapping[str, float], alpha: float) -> dict[str, dict]:
    """Holm's step-down adjustment (statsmodels): per name its adjusted p and whether it is rejected at ``alpha``."""
    from statsmodels.stats.multitest import multipletests

    names = list(pvalues)
    if not names:
        return {}
    reject, adjusted, _, _ = multipletests([pvalues[n] for n in names], alpha=alpha, method="holm")
    return {n: {"p_holm": float(a), "rejected": bool(r)} for n, a, r in zip(names, adjusted, reject)}


def paired_tests(rows: Sequence[Mapping], measure: str, base: str, settings: Sequence[str],
                 alpha: float | None) -> dict:
    """Each setting against the base on ``measure`` (``paired_wilcoxon``: setting minus base over the paired seeds),
    with the mean difference; with ``alpha``, Holm over the settings that could be tested (a setting without a
    p-value, e.g. no seed where it differs from the base, is not rejected)."""
    blocks = by_seed([r for r in rows if r.get("status", "completed") == "completed"], measure)
    out = {}
    for s in settings:
        res = paired_wilcoxon(blocks, base, s)
        d = [blocks[k][s] - blocks[k][base] for k in blocks if base in blocks[k] and s in blocks[k]]
        out[s] = {**res, "mean_difference": float(np.mean(d)) if d else None}
    if alpha is not None:
        adjusted = holm({s: r["p"] for s, r in out.items() if "p" in r}, alpha)
        for s, r in out.items():
            r.update(adjusted.get(s, {"p_holm": None, "rejected": False}))
    return out


def analyse_silent(rows: Sequence[Mapping], study) -> dict:
    """The registered analysis: the primary measure's tests with their Holm verdicts, then each secondary measure's
    (no verdict), and per setting its completed models and median of each measure."""
    settings = [c for c in study.configs if c != study.base]
    done = [r for r in rows if r.get("status") == "completed"]
    medians = {c: {m: (float(np.median(v)) if (v := [float(r[m]) for r in done if r["config"] == c
                                                       and r.get(m) is not None and np.isfinite(float(r[m]))])
                       else None) for m in (study.measure, *study.secondary)} for c in study.configs}
    primary = paired_tests(done, study.measure, study.base, settings, study.alpha)
    return {"question": "at one (q, T, sigma), and so one ideal audit, does what the audit finds vary with settings "
                        "the accountant does not see?",
            "base": study.base, "settings": settings, "alpha": study.alpha, "correction": "holm",
            "test": "Wilcoxon signed-rank, two-sided, setting minus base on the paired seeds",
            "models": {c: sum(r["config"] == c for r in done) for c in study.configs}, "medians": medians,
            "primary": {"measure": study.measure, "tests": primary,
                        "varies": any(r["rejected"] for r in primary.values())},
            "secondary": {m: {"tests": paired_tests(done, m, study.base, settings, None),
                              "role": "secondary (no verdict)"} for m in study.secondary}}


def power(base_draws: np.ndarray, effect: float, pairs: int, settings: int, alpha: float, trials: int,
          seed: int) -> float:
    """The chance that one setting whose models' primary measure is the base's shifted by ``effect`` is rejected at
    Holm's first threshold ``alpha / settings`` (a lower bound on its power under Holm): ``trials`` simulated
    studies, each drawing ``pairs`` base models and ``pairs`` shifted models independently from ``base_draws`` (the
    ideal audit's per-model values)."""
    from scipy.stats import wilcoxon

    from ..shared.core.seeds import stream

    rng = stream("variance.silent.power").numpy(seed)
    hits = 0
    for _ in range(trials):
        d = rng.choice(base_draws, pairs) + effect - rng.choice(base_draws, pairs)
        if np.count_nonzero(d) and wilcoxon(d, zero_method="wilcox").pvalue <= alpha / settings:
            hits += 1
    return hits / trials if trials else float("nan")


def plan(study, population: int, m: int, rule: tuple[int, int], accountant: str) -> dict:
    """The study's design as the accountant and the ideal audit see it, before any model: q = b / population, the
    calibrated sigma, the ideal per-model count of correct guesses (mean, SD, over ``study.power_trials`` audits) and
    the power of each setting's test at ``study.effect`` (``power``; for the primary measure v only)."""
    from ..shared.bounds.ceiling import ideal_counts
    from ..shared.bounds.keys import clip_guesses
    from ..shared.core.privacy import calibrate_sigma
    from ..shared.core.seeds import stream

    (b, steps), = {(c.batch_size, c.steps) for c in study.configs.values()}
    q = b / population
    sigma = calibrate_sigma(study.epsilon, study.delta, q, steps, accountant)
    k_pos, k_neg = clip_guesses(*rule, m)
    counts = ideal_counts(q, steps, sigma, m=m, k_pos=k_pos, k_neg=k_neg, trials=max(study.power_trials, 1),
                          seed=stream("variance.silent.ideal").int_seed(study.seed))
    v = np.array([c[2] for c in counts], dtype=float)
    settings = len(study.configs) - 1
    out = {"batch_size": b, "steps": steps, "population": population, "sample_rate": q, "noise_multiplier": sigma,
           "accountant": accountant, "m": m, "k_pos": k_pos, "k_neg": k_neg,
           "ideal_v": {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else None,
                       "trials": len(v)},
           "pairs": len(study.seeds), "settings": settings, "alpha": study.alpha, "effect": study.effect,
           "assumption": "each model's count an independent draw of the ideal audit's (last-iterate linear model); "
                         "a setting's models the base's shifted by the effect"}
    if study.measure == "v":
        out["power"] = {str(e): power(v, e, len(study.seeds), settings, study.alpha, study.power_trials, study.seed)
                        for e in (study.effect / 2, study.effect, study.effect * 1.5)}
    return out


def silent_result(study, path) -> dict | None:
    """The variance stage's account of the second study from its table (None before the flow wrote one): progress,
    the models, the power statement written before them (``study.plan``), and the registered analysis
    (``analyse_silent``) only once every registered model has run; its design must be the registered one."""
    import json
    from dataclasses import asdict
    from pathlib import Path

    if not Path(path).is_file():
        return None
    rows, done, out = registered_table(study, path, "silent")
    out.update({"configs": {c: asdict(v) for c, v in study.configs.items()}, "base": study.base,
                "models": [{k: r[k] for k in ("point", "config", "seed", "rev", "status", "v", "r", "m", "eps_lb_95",
                                              "member_shift", "ideal_eps_lb_95_median", "valid_perplexity",
                                              "sample_rate", "noise_multiplier", "accountant_epsilon")} for r in rows],
                "plan": json.loads(Path(study.plan).read_text()) if Path(study.plan).is_file() else None})
    out["analysis"] = analyse_silent(done, study) if done and not out["pending"] and not out["failed"] else None
    return out
