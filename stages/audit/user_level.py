"""The one-run audit over canary users (``canaries.audit_users``): what a run leaks about a person, not a row.

Each audit user is a fair seeded coin; a held-in user's k rows were all trained on, a held-out user's none. The
score of a user is the sum of its rows' scores under ``audit.user.attack`` (their clipped gradients add along the
user's one secret row: the linear model of ``stages.tools.studies.user_level``), fixed with the rule (``k_pos`` highest
"in", ``k_neg`` lowest "out") in params before any score. The Steinke et al. (2023) bound over the m users then
lower-bounds the epsilon of a guarantee whose unit is the user, whatever unit the run's DP protects.

Beside a DP run's bound: the accountant's epsilon about the run's own unit, and the ideal of the same test under the
linear last-iterate model (``ceiling.ideal_counts``): under example-level DP a user's k rows are sampled on their own
(Bin(k T, q) against the same noise: group privacy), under user-level DP together and clipped as one unit (a single
row's Bin(T, q)). A heuristic ceiling, not a limit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..finetune.schema import PrivacyRecord
from ..shared.bounds.ceiling import ideal_counts, percentile_mc, quantile_mc, trial_bounds
from ..shared.bounds.keys import IDEAL_SUMMARIES, BoundKeys, clip_guesses, mc_interval_key
from ..shared.bounds.one_run import epsilon_lower_bound, guesses
from ..shared.core.params import check
from .primary import bounds
from .roc import roc_metrics

#: the assumption printed next to the ideal
USER_IDEAL_ASSUMPTION = ("linear last-iterate model over users: a canary user's rows add clipped gradients along one "
                         "direction (heuristic; a real audit can exceed it)")


def user_test_name(run: str) -> str:
    """The seed ledger's name of a run's user-level test (its own entries, under the run's design)."""
    return f"{run}:user"


@dataclass(frozen=True)
class UserAuditParams:
    """``audit.user``: the user-level one-run test of every run trained on the audit users, fixed before scores."""

    #: the per-row membership score summed per user (an attack the run scores canaries with)
    attack: str
    k_pos: int
    k_neg: int

    def problems(self):
        return (check(bool(self.attack), "attack", "must name a membership attack", self.attack)
                + check(self.k_pos >= 0 and self.k_neg >= 0, "k_pos", "counts must be >= 0", (self.k_pos, self.k_neg))
                + check(self.k_pos + self.k_neg > 0, "k_pos", "k_pos + k_neg must be > 0", self.k_pos + self.k_neg))


def per_user(ids, scores, members, user_of: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(users, summed score, member) over the audit users, users in index order; refused when a user's rows
    disagree on membership (one coin per user) or a user lacks rows."""
    users = np.array([user_of[str(i)] for i in ids], dtype=np.int64)
    order = np.unique(users)
    index = np.searchsorted(order, users)
    total = np.zeros(len(order))
    np.add.at(total, index, np.asarray(scores, dtype=np.float64))
    member = np.zeros(len(order), dtype=bool)
    member[index] = members
    if (member[index] != np.asarray(members, dtype=bool)).any():
        raise ValueError("audit users: a user's rows disagree on membership (one coin per user)")
    return order, total, member


def user_test(ids, scores, members, user_of: dict[str, int], rows: int, params, delta: float) -> dict:
    """The user-level test's counts and bounds at every confidence of ``audit.primary``, the per-user AUROC (95%
    stratified bootstrap over users) and the audit's unit."""
    p = params.user
    _, s, y = per_user(ids, scores, members, user_of)
    m, r, v = guesses(s, y, p.k_pos, p.k_neg)
    k_pos, k_neg = clip_guesses(p.k_pos, p.k_neg, m)
    roc = roc_metrics(s, y, params.fprs, params.bootstrap, params.seed, params.min_per_side)
    return {"unit": "user", "attack": p.attack, "score": "sum of a user's row scores", "m": m, "k": rows,
            "k_pos": k_pos, "k_neg": k_neg, "r": r, "v": v, "delta": delta, "members": roc["members"],
            "non_members": roc["non_members"], "canary_user_auroc": roc["auroc"],
            "canary_user_auroc_ci95": roc["auroc_ci95"],
            **bounds(m, r, v, delta, params.confidences, gdp=False),
            **{BoundKeys(c).stat("max_provable_eps_lb"): epsilon_lower_bound(m, r, r, delta, c) if r else 0.0
               for c in params.confidences}}


def ideal_summaries(counts, delta: float, confidence: float) -> dict:
    """The median and 10 / 90 % quantiles of simulated one-run tests' bounds (``ceiling.ideal_counts``) at one
    confidence, each with its Monte Carlo interval (the plan's and the audit's user-level ideals alike)."""
    keys, out = BoundKeys(confidence), {}
    trials = trial_bounds(counts, delta, confidence)
    for name, pct in zip(IDEAL_SUMMARIES, (50, 10, 90)):
        mc = quantile_mc(trials, pct)
        out[keys.ideal("eps_lb", name)] = mc["value"]
        out[mc_interval_key(keys.ideal("eps_lb", name))] = [mc["low"], mc["high"]]
    return out


def with_user_ideal(test: dict, privacy: PrivacyRecord, params) -> dict:
    """A DP run's user-level test next to the accountant's epsilon (about the run's own unit) and the ideal of the
    same test: the median and 10/90 % quantiles of its simulated bounds (each with its Monte Carlo interval) and the
    run's percentile in it."""
    q, T, sigma = privacy.sample_rate, privacy.steps, privacy.noise_multiplier
    unit = privacy.unit
    counts = ideal_counts(q, T, sigma, m=test["m"], k_pos=test["k_pos"], k_neg=test["k_neg"],
                          trials=params.ceiling.trials, seed=params.ceiling.seed,
                          rows=test["k"] if unit == "example" else 1)
    out = {**test, "mechanism_unit": unit, "accountant_epsilon": float(privacy.epsilon_spent),
           "ideal_trials": params.ceiling.trials, "ideal_assumption": USER_IDEAL_ASSUMPTION}
    for c in params.confidences:
        out.update(ideal_summaries(counts, test["delta"], c))
    out["ideal_percentile"], out["ideal_percentile_mcse"] = percentile_mc(test["v"], np.array([c[2] for c in counts]))
    return out
