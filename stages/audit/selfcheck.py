"""The DP engine self-check's judgement (stages/finetune/selfcheck.py trains; flows/selfcheck.py runs both):
one-run bounds from the canary scores of one trial, the flag, and reports/selfcheck.json.

A trial is flagged when the f-DP one-run test (gdp.py) rejects the accountant's claim at 1 - alpha / family:
the GDP epsilon lower bound at that confidence exceeds the accountant's epsilon. At q = 1 DP-SGD is the Gaussian
mechanism and the accountant's curve that of mu = sqrt(T) / sigma, so this tests the claim itself. The Steinke
bound (one_run.py) assumes nothing and is looser (it degrades with m * delta). ``ideal``: the GDP bound at 95%
at the median count of right guesses that exact Gaussian scores of a correct engine give (ceiling.ideal_counts,
seeded). The guard states its power: the simulated rate at which it flags half the noise at the family's level.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..core.errors import ConfigError
from ..core.seeds import stream
from .ceiling import ideal_counts, trial_bounds
from .gdp import gdp_epsilon_lower_bound, gdp_mu_lower_bound
from .one_run import epsilon_lower_bound, guesses

SELFCHECK_VERSION = 1
IDEAL_TRIALS = 201  # odd: the median count is one trial's


@lru_cache(maxsize=64)
def _ideal(sample_rate: float, steps: int, sigma: float, m: int, k_in: int, k_out: int, delta: float) -> float:
    """GDP epsilon-hat95 at the median count of ``ceiling.ideal_counts`` (exact Gaussian scores of a correct engine;
    the bound is monotone in the count, so this is the median bound)."""
    counts = ideal_counts(sample_rate, steps, sigma, m=m, k_pos=k_in, k_neg=k_out, trials=IDEAL_TRIALS,
                          seed=stream("audit.selfcheck.ideal").int_seed())
    v = int(np.median([c[2] for c in counts]))
    return gdp_epsilon_lower_bound(m, counts[0][1], v, delta, 0.95)


def half_noise_power(row: dict, k_in: int, k_out: int, alpha: float, family: int, trials: int = 200,
                     seed: int = stream("audit.selfcheck.half_noise").int_seed()) -> dict:
    """The guard's power: how often the same test, at the same per-configuration level, flags an engine that adds
    half the noise its accountant books (exact Gaussian scores, seeded simulation)."""
    counts = ideal_counts(row["sample_rate"], row["steps"], row["noise_multiplier"] / 2, m=row["canaries"],
                          k_pos=k_in, k_neg=k_out, trials=trials, seed=seed)
    bounds = trial_bounds(counts, row["delta"], 1.0 - alpha / family, gdp=True)
    return {"mutant": "noise_halved", "trials": trials, "seed": seed, "family": family,
            "flag_rate": float(np.mean(bounds > row["accountant_epsilon"]))}


def verdict(scores, members, privacy: dict, k_in: int, k_out: int, alpha: float, family: int) -> dict:
    """The bounds of one trial (``privacy``: its accountant record) and its flag at 1 - alpha / family."""
    if privacy["sample_rate"] != 1:
        raise ConfigError(f"selfcheck.sample_rate: must be 1, where the accountant's claim is exactly mu-GDP and the "
                          f"flag tests the claim itself (got {privacy['sample_rate']})")
    m, r, v = guesses(scores, members, k_in, k_out)
    delta, eps, sigma = privacy["delta"], privacy["epsilon_spent"], privacy["noise_multiplier"]
    strict = 1.0 - alpha / family
    gdp_strict = gdp_epsilon_lower_bound(m, r, v, delta, strict)
    return {"canaries": m, "members": int(np.sum(members)), "guesses": r, "correct": v,
            "accountant_epsilon": eps, "delta": delta, "noise_multiplier": sigma,
            "sample_rate": privacy["sample_rate"], "steps": privacy["steps"],
            "eps_lb_95": epsilon_lower_bound(m, r, v, delta, 0.95),
            "eps_lb_999": epsilon_lower_bound(m, r, v, delta, strict),
            "gdp_eps_lb_95": gdp_epsilon_lower_bound(m, r, v, delta, 0.95),
            "gdp_eps_lb_999": gdp_strict, "gdp_mu_lb_999": gdp_mu_lower_bound(m, r, v, strict),
            "mu": float(np.sqrt(privacy["steps"]) / sigma), "confidence_999": strict,
            "ideal": _ideal(1.0, int(privacy["steps"]), float(sigma), m, k_in, k_out, float(delta)),
            "flagged": bool(gdp_strict > eps)}


HEADER = (f"{'mode':6s} {'paradigm':17s} {'proc':>4s} {'acct eps':>8s} {'eps95':>6s} {'gdp95':>6s} "
          f"{'gdp999':>6s} {'ideal':>6s}  verdict")


def format_row(r: dict) -> str:
    return (f"{r['mode']:6s} {r['paradigm']:17s} {r['processes']:4d} {r['accountant_epsilon']:8.3f} "
            f"{r['eps_lb_95']:6.2f} {r['gdp_eps_lb_95']:6.2f} {r['gdp_eps_lb_999']:6.2f} {r['ideal']:6.2f}  "
            + ("FLAGGED: spends more than the accountant says" if r["flagged"] else "pass"))


def document(design: dict, rows: list[dict]) -> dict:
    """reports/selfcheck.json: the design, the guard's power, what was and was not checked, one row per
    configuration (``design``: at least guesses_in, guesses_out and alpha)."""
    return {
        "version": SELFCHECK_VERSION,
        "power": half_noise_power(rows[0], design["guesses_in"], design["guesses_out"], design["alpha"], len(rows)),
        "design": {**design, "family": len(rows), "optimizer": "sgd",
                   "statistic": "movement of each canary's own coordinates along its gradient's direction",
                   "flag": "GDP one-run bound at 1 - alpha/family > the accountant's epsilon (q = 1: the claim is "
                           "exactly mu-GDP, so the Gaussian trade-off is the claim under test, not an assumption)"},
        "checked": "the fine-tune's DP path (loop.train: Poisson sampler, make_private, the mode's clipping, "
                   "opacus noise and accountant, DP-SGD; torchrun + opacus distributed optimizer with 2 processes) "
                   "on the layer types the paradigms train (Linear, Embedding, LoRA-wrapped Linear, RMSNorm)",
        "not_checked": "q < 1 (subsampling amplification is the accountant's maths, not exercised at q = 1); "
                       "multi-step composition beyond T = steps; DP-Adam/AdamW (post-processing of the same noisy "
                       "gradient); the prompt and prefix paradigms; transformer layers between the canary and its "
                       "rows; the real model's tokenizer, data and checkpoint resume",
        "all_pass": not any(r["flagged"] for r in rows),
        "rows": rows,
    }
