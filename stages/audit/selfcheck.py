"""The DP engine self-check's judgement (stages/finetune/selfcheck.py trains; flows/selfcheck.py runs both):
one-run bounds from the canary scores of one trial, the flag, and reports/selfcheck.json.

A trial is flagged when the f-DP one-run test (gdp.py) rejects the accountant's claim at 1 - alpha / family:
the GDP epsilon lower bound at that confidence exceeds the accountant's epsilon. At q = 1 DP-SGD is the Gaussian
mechanism and the accountant's curve that of mu = sqrt(T) / sigma, so this tests the claim itself. The Steinke
bound (one_run.py) assumes nothing and is looser (it degrades with m * delta). ``ideal``: the GDP bound at 95%
at the median count of right guesses that exact Gaussian scores of a correct engine give (seeded simulation).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .gdp import gdp_epsilon, gdp_epsilon_lower_bound, gdp_mu_lower_bound
from .one_run import epsilon_lower_bound, guesses

SELFCHECK_VERSION = 1


@lru_cache(maxsize=64)
def expected_count(m: int, k_in: int, k_out: int, mu: float, trials: int = 200, seed: int = 0) -> int:
    """Median number of right guesses on exact Gaussian scores (members N(mu, 1), others N(0, 1))."""
    rng = np.random.default_rng([seed, 2])
    counts = []
    for _ in range(trials):
        y = rng.random(m) < 0.5
        counts.append(guesses(rng.normal(size=m) + mu * y, y, k_in, k_out)[2])
    return int(np.median(counts))


def verdict(scores, members, privacy: dict, k_in: int, k_out: int, alpha: float, family: int) -> dict:
    """The bounds of one trial (``privacy``: its accountant record) and its flag at 1 - alpha / family."""
    m, r, v = guesses(scores, members, k_in, k_out)
    delta, eps = privacy["delta"], privacy["epsilon_spent"]
    strict = 1.0 - alpha / family
    mu = float(np.sqrt(privacy["steps"]) / privacy["noise_multiplier"])  # q = 1: the Gaussian mechanism
    gdp_strict = gdp_epsilon_lower_bound(m, r, v, delta, strict)
    ideal = gdp_epsilon_lower_bound(m, r, expected_count(m, k_in, k_out, mu), delta, 0.95) \
        if gdp_epsilon(mu, delta) > 0 else 0.0
    return {"canaries": m, "members": int(np.sum(members)), "guesses": r, "correct": v,
            "accountant_epsilon": eps, "delta": delta, "noise_multiplier": privacy["noise_multiplier"],
            "sample_rate": privacy["sample_rate"], "steps": privacy["steps"],
            "eps_lb_95": epsilon_lower_bound(m, r, v, delta, 0.95),
            "eps_lb_999": epsilon_lower_bound(m, r, v, delta, strict),
            "gdp_eps_lb_95": gdp_epsilon_lower_bound(m, r, v, delta, 0.95),
            "gdp_eps_lb_999": gdp_strict, "gdp_mu_lb_999": gdp_mu_lower_bound(m, r, v, strict),
            "mu": mu, "confidence_999": strict, "ideal": ideal, "flagged": bool(gdp_strict > eps)}


HEADER = (f"{'mode':6s} {'paradigm':17s} {'proc':>4s} {'acct eps':>8s} {'eps95':>6s} {'gdp95':>6s} "
          f"{'gdp999':>6s} {'ideal':>6s}  verdict")


def format_row(r: dict) -> str:
    return (f"{r['mode']:6s} {r['paradigm']:17s} {r['processes']:4d} {r['accountant_epsilon']:8.3f} "
            f"{r['eps_lb_95']:6.2f} {r['gdp_eps_lb_95']:6.2f} {r['gdp_eps_lb_999']:6.2f} {r['ideal']:6.2f}  "
            + ("FLAGGED: spends more than the accountant says" if r["flagged"] else "pass"))


def document(design: dict, rows: list[dict]) -> dict:
    """reports/selfcheck.json: the design, what was and was not checked, one row per configuration."""
    return {
        "version": SELFCHECK_VERSION,
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
