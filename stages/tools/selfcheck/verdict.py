"""The DP engine self-check's judgement (``trials.py`` trains; leakaudit/selfcheck.py runs both): the
specification tests of one trial, the one-run f-DP test beside them, the verdict naming what broke, the power,
and reports/selfcheck.json.

The specification (the mechanism the accountant accounted, sigma and q read from the accountant's own history):
along each canary's own gradient direction, step t's privatized gradient in units of C / B is

    x_ti = [i drawn at step t] + sigma z_ti,   z_ti iid N(0, 1),   draws of a member ~ Bin(T, q) in total.

Tests, each two-sided unless said, each at alpha / (configurations x ``TESTS``) (Bonferroni over the family):

* ``noise``: the non-members' x (never drawn: pure noise) against sigma: sum (x / sigma)^2 ~ chi^2(N T) exactly;
  the estimate is the noise scale as a multiple of the booked one, with its exact chi-square interval;
* ``sensitivity``: members' total x against their recorded draws n_i: the least-squares slope
  sum n_i X_i / sum n_i^2 must be 1 (the clipped norm C), standard error sigma sqrt(T / sum n_i^2);
* ``inclusion``: the members' draw counts against Bin(T, q) (chi-square goodness of fit, cells merged to an
  expected count >= 5); and the steps run against the steps booked (exact);
* ``independence`` (one-sided): the non-members' per-step noise is uncorrelated across steps:
  N sum_{s<t} r_st^2 ~ chi^2(T (T - 1) / 2) (a noise draw reused at two steps gives r = 1);
* ``curve`` (one-sided): the one-run f-DP test of the final model against the accountant's own trade-off curve
  (q = 1: mu = sqrt(T) / sigma-GDP, the claim itself; q < 1: the Poisson-subsampled Gaussian's, stages/audit/
  curve.py, with the accountant's discretisation error) rejects the claim.

And one exact check: ``optimizer``: the final weights equal the optimizer replayed on the recorded privatized
gradients (relative error <= ``REPLAY_RTOL``): DP-SGD / DP-Adam(W) are post-processing of those gradients. A trial
whose canaries were not all clipped (a gradient norm below C) is a broken design, not a verdict (ValueError).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import stats

from ...shared.bounds.ceiling import ideal_counts
from ...shared.bounds.curve import curve_rejects
from ...shared.bounds.gdp import gdp_epsilon_lower_bound, gdp_mu_lower_bound, rejects
from ...shared.bounds.one_run import epsilon_lower_bound, guesses
from ...shared.core.seeds import stream
from ...shared.studies.selfcheck import SELFCHECK_VERSION, SelfcheckReport, selfcheck_report

IDEAL_TRIALS = 201  # odd: the median count is one trial's
#: the statistical tests of each configuration (the family is configurations x these)
TESTS = ("noise", "sensitivity", "inclusion", "independence", "curve")
#: what each test's failure says broke
BROKE = {"noise": "noise scale", "sensitivity": "clipped sensitivity", "inclusion": "sampler vs accountant (q, T)",
         "independence": "noise reused across steps", "curve": "privacy curve (one-run f-DP test)",
         "optimizer": "optimizer is not post-processing of the privatized gradient"}
REPLAY_RTOL = 1e-4


def level(alpha: float, configurations: int) -> float:
    """Each test's level: alpha over the whole family."""
    return alpha / (configurations * len(TESTS))


@lru_cache(maxsize=64)
def _ideal(sample_rate: float, steps: int, sigma: float, m: int, k_in: int, k_out: int, delta: float) -> float:
    """GDP epsilon-hat95 at the median count of ``audit.ceiling.ideal_counts`` (exact Gaussian last-iterate scores of a
    correct SGD engine; the bound is monotone in the count, so this is the median bound)."""
    counts = ideal_counts(sample_rate, steps, sigma, m=m, k_pos=k_in, k_neg=k_out, trials=IDEAL_TRIALS,
                          seed=stream("audit.selfcheck.ideal").int_seed())
    v = int(np.median([c[2] for c in counts]))
    return gdp_epsilon_lower_bound(m, counts[0][1], v, delta, 0.95)


def booked(privacy: dict) -> tuple[float, float, int, bool]:
    """(sigma, q, steps, consistent) from the accountant's history (one (sigma, q) for the whole run)."""
    hist = privacy["accountant_history"]
    sigmas, rates = {h[0] for h in hist}, {h[1] for h in hist}
    return hist[0][0], hist[0][1], int(sum(h[2] for h in hist)), len(sigmas) == 1 and len(rates) == 1


def _two_sided(p_low: float, p_high: float) -> float:
    return float(min(1.0, 2 * min(p_low, p_high)))


def noise_test(per_step: np.ndarray, members: np.ndarray, sigma: float, a: float) -> dict:
    z = per_step[:, ~members] / sigma
    v, df = float(np.sum(z * z)), z.size
    lo, hi = stats.chi2.ppf(1 - a / 2, df), stats.chi2.ppf(a / 2, df)
    return {"p": _two_sided(stats.chi2.cdf(v, df), stats.chi2.sf(v, df)), "estimate": float(np.sqrt(v / df)),
            "interval": [float(np.sqrt(v / lo)), float(np.sqrt(v / hi))], "n": int(df)}


def sensitivity_test(per_step: np.ndarray, members: np.ndarray, inclusions: np.ndarray, sigma: float,
                     a: float) -> dict:
    n = inclusions[members].astype(np.float64)
    x = per_step[:, members].sum(0)
    nn = float(np.sum(n * n))
    if nn == 0:
        return {"p": 1.0, "estimate": None, "interval": None, "n": 0}
    slope, se = float(np.sum(n * x) / nn), sigma * np.sqrt(per_step.shape[0] / nn)
    z = (slope - 1) / se
    half = stats.norm.isf(a / 2) * se
    return {"p": float(2 * stats.norm.sf(abs(z))), "estimate": slope, "interval": [slope - half, slope + half],
            "n": int(members.sum())}


def inclusion_test(inclusions: np.ndarray, members: np.ndarray, q: float, steps_booked: int, steps_run: int) -> dict:
    counts = inclusions[members]
    if steps_run != steps_booked:
        return {"p": 0.0, "estimate": None, "interval": None, "n": int(counts.size),
                "note": f"{steps_run} steps run, {steps_booked} booked"}
    if q >= 1:  # every member drawn at every step
        return {"p": float(np.all(counts == steps_run)), "estimate": float(counts.mean()), "interval": None,
                "n": int(counts.size)}
    expected = stats.binom.pmf(np.arange(steps_run + 1), steps_run, q) * counts.size
    observed = np.bincount(np.minimum(counts, steps_run), minlength=steps_run + 1).astype(np.float64)
    obs, exp = [], []  # merge cells from the left until each expects >= 5
    o = e = 0.0
    for k in range(steps_run + 1):
        o, e = o + observed[k], e + expected[k]
        if e >= 5:
            obs.append(o)
            exp.append(e)
            o = e = 0.0
    if obs:
        obs[-1], exp[-1] = obs[-1] + o, exp[-1] + e
    if len(obs) < 2:
        return {"p": 1.0, "estimate": float(counts.mean() / steps_run), "interval": None, "n": int(counts.size)}
    chi = float(np.sum((np.array(obs) - np.array(exp)) ** 2 / np.array(exp)))
    return {"p": float(stats.chi2.sf(chi, len(obs) - 1)), "estimate": float(counts.mean() / steps_run),
            "interval": None, "n": int(counts.size)}


def independence_test(per_step: np.ndarray, members: np.ndarray, sigma: float) -> dict:
    z = per_step[:, ~members] / sigma
    T, N = z.shape
    if T < 2:
        return {"p": 1.0, "estimate": None, "interval": None, "n": int(N)}
    gram = z @ z.T
    r = gram / np.sqrt(np.outer(np.diag(gram), np.diag(gram)))
    upper = r[np.triu_indices(T, 1)]
    q = float(N * np.sum(upper ** 2))
    return {"p": float(stats.chi2.sf(q, T * (T - 1) // 2)), "estimate": float(np.max(np.abs(upper))),
            "interval": None, "n": int(N)}


def curve_test(m: int, r: int, v: int, q: float, steps: int, sigma: float, a: float) -> dict:
    rejected = rejects(m, r, v, np.sqrt(steps) / sigma, a) if q >= 1 else curve_rejects(m, r, v, q, steps, sigma, a)
    return {"p": 0.0 if rejected else 1.0, "estimate": None, "interval": None, "n": m,
            "note": "rejected at its level" if rejected else "not rejected at its level"}


def verdict(trial, config, k_in: int, k_out: int, alpha: float, family: int) -> dict:
    """One trial's tests at the family's level, its one-run bounds, and what broke (empty: pass)."""
    if trial.clip_ratio <= 1:
        raise ValueError(f"self-check design: a canary's gradient norm fell to {trial.clip_ratio:.3g} x C (not "
                         "clipped): raise selfcheck.gradient_scale")
    privacy = trial.privacy
    sigma, q, steps, consistent = booked(privacy)
    a = level(alpha, family)
    m, r, v = guesses(trial.scores, trial.members, k_in, k_out)
    delta, eps = privacy["delta"], privacy["epsilon_spent"]
    tests = {
        "noise": noise_test(trial.per_step, trial.members, sigma, a),
        "sensitivity": sensitivity_test(trial.per_step, trial.members, trial.inclusions, sigma, a),
        "inclusion": inclusion_test(trial.inclusions, trial.members, q, steps, trial.per_step.shape[0]),
        "independence": independence_test(trial.per_step, trial.members, sigma),
        "curve": curve_test(m, r, v, q, steps, sigma, a),
    }
    broke = [BROKE[k] for k, t in tests.items() if t["p"] < a]
    if not consistent:
        broke.append("accountant history changes (sigma or q) within the run")
    if not trial.replay_error <= REPLAY_RTOL:
        broke.append(BROKE["optimizer"])
    strict = 1.0 - a
    return {"probe": config.probe, "sample_rate": q, "steps": steps, "optimizer": config.optimizer,
            "resumed": config.resume, "canaries": m, "members": int(np.sum(trial.members)), "guesses": r,
            "correct": v, "accountant_epsilon": eps, "delta": delta, "noise_multiplier": sigma,
            "divisor": trial.divisor, "test_level": a,
            "tests": tests, "replay_error": trial.replay_error, "clip_ratio": trial.clip_ratio,
            "noise_scale": tests["noise"]["estimate"], "noise_scale_interval": tests["noise"]["interval"],
            "sensitivity": tests["sensitivity"]["estimate"],
            "eps_lb_95": epsilon_lower_bound(m, r, v, delta, 0.95),
            "gdp_eps_lb_95": gdp_epsilon_lower_bound(m, r, v, delta, 0.95),
            "gdp_eps_lb_strict": gdp_epsilon_lower_bound(m, r, v, delta, strict),
            "gdp_mu_lb_strict": gdp_mu_lower_bound(m, r, v, strict), "mu": float(np.sqrt(steps) / sigma),
            "ideal": _ideal(float(q), int(steps), float(sigma), m, k_in, k_out, float(delta)),
            "broke": broke, "flagged": bool(broke)}


def noise_power(rows: list[dict], factor: float, alpha: float) -> dict:
    """How often an engine whose every noise draw is ``factor`` x the booked sigma is flagged by the noise test
    alone, at the family's level (exact: the statistic is then factor^2 chi^2(df)); other tests can only add.
    Per configuration and for the whole family (any configuration flagged)."""
    a = level(alpha, len(rows))
    per = []
    for row in rows:
        df = row["tests"]["noise"]["n"]
        lo, hi = stats.chi2.ppf(a / 2, df), stats.chi2.isf(a / 2, df)
        per.append(float(stats.chi2.cdf(lo / factor ** 2, df) + stats.chi2.sf(hi / factor ** 2, df)))
    return {"factor": factor, "family": len(rows), "test_level": a, "least_per_configuration": min(per),
            "family_flag_rate": float(1 - np.prod([1 - p for p in per])),
            "method": "exact chi-square law of the noise-scale test (no simulation needed)"}


HEADER = (f"{'configuration':46s} {'acct eps':>8s} {'noise':>6s} {'sens':>6s} {'gdp95':>6s} {'ideal':>6s}  verdict")


def format_row(r: dict) -> str:
    sens = "  n/a" if r["sensitivity"] is None else f"{r['sensitivity']:6.3f}"
    return (f"{r['config']:46s} {r['accountant_epsilon']:8.3f} {r['noise_scale']:6.3f} {sens:>6s} "
            f"{r['gdp_eps_lb_95']:6.2f} {r['ideal']:6.2f}  "
            + (("FLAGGED: " + "; ".join(r["broke"])) if r["flagged"] else "pass"))


NOT_CHECKED = ("the prompt and prefix paradigms; LoRA beyond its first step (its shared lora_A then takes part of "
               "each canary's gradient); the real model's tokenizer and data; more than 2 processes; a secure-RNG "
               "run (its noise is not reproducible, so it is checked through the same code with a seeded generator)")


def document(design: dict, rows: list[dict]) -> SelfcheckReport:
    """reports/selfcheck.json as its record: the design (selfcheck params as run), the power, what was and was not
    checked, one row per configuration (``rows``: as ``leakaudit selfcheck`` builds them)."""
    checked = sorted({f"q={r['sample_rate']:g} T={r['steps']} {r['optimizer']}" for r in rows})
    return selfcheck_report({
        "version": SELFCHECK_VERSION,
        "power": {f"noise_x{f:g}": noise_power(rows, f, design["alpha"]) for f in (0.9, 0.95)},
        "design": {**design, "family": len(rows), "tests": list(TESTS), "test_level": level(design["alpha"], len(rows)),
                   "specification": "along each canary's own gradient direction, each step's privatized gradient is "
                                    "C/B x [drawn] + N(0, (sigma C/B)^2), draws Bin(T, q), noise independent "
                                    "across steps; sigma, q, T as the accountant booked them",
                   "flag": "any test rejecting at alpha / (configurations x tests), or the optimizer replay "
                           "differing: the verdict names what broke"},
        "checked": "the fine-tune's DP path (loop.train: Poisson sampler, make_private, the mode's clipping, opacus "
                   "noise and accountant, the optimizer, checkpoint resume; torchrun + opacus distributed optimizer "
                   "with 2 processes) on the layer types the paradigms train (Linear, Embedding, LoRA-wrapped Linear, "
                   "RMSNorm) and behind a Llama decoder layer over 6-token sequences; user-level DP (paradigm users: "
                   "each canary a user of several rows, a user's summed gradient clipped as one unit, hooks); "
                   "regimes: " + ", ".join(checked),
        "not_checked": NOT_CHECKED,
        "all_pass": not any(r["flagged"] for r in rows),
        "rows": rows,
    }, "reports/selfcheck.json")
