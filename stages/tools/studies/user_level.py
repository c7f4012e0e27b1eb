"""The ideal one-run audit over canary users, under example-level and user-level DP-SGD at one (epsilon, delta):
what a user-level audit could show at best, computed before any user-level run (the plan's first step).

The linear last-iterate model (``stages.shared.bounds.ceiling``), applied to users: a canary user holds k rows that
share one
secret, so their clipped gradients add along one direction. Under **example-level** DP-SGD each row is sampled on its
own at rate q, so a member user's statistic is Bin(k T, q) + N(0, T sigma^2): k times the inclusions against the
same noise (the guarantee a user with k rows gets is group privacy, about k epsilon). Under **user-level** DP-SGD the
user is sampled at rate q and its summed gradient clipped to C as one unit: Bin(T, q) + N(0, T sigma^2), a single
row's statistic. A non-member user's statistic is N(0, T sigma^2) under both. sigma is calibrated by the accountant
to (epsilon, delta) at the same q and T for both units (over examples, or over users), so the two mechanisms carry
the same accountant's epsilon about their own unit.

The one-run test over m canary users guesses "in" for the k_pos highest statistics (Steinke et al. 2023, each user
a fair coin); each trial's bound is the assumption-free epsilon lower bound. A heuristic ceiling, not a limit (the
model is linear; a real audit can exceed it), seeded: the same arguments give the same numbers.
"""
from __future__ import annotations

from ...audit.schema import Metrics
from ...audit.user_level import ideal_summaries
from ...shared.bounds.ceiling import ideal_counts
from ...shared.core.errors import DataError
from ...shared.core.privacy import calibrate_sigma
from ...shared.core.seeds import stream
from ...shared.studies.user_level import UserLevelPlanParams  # noqa: F401  (read here and by the flows)

#: the audit units a mechanism's ideal is computed for, and how many independent inclusions a canary user's rows get
UNITS = ("example", "user")


def user_ideal(sample_rate: float, steps: int, sigma: float, *, unit: str, rows: int, m: int, k_pos: int,
               delta: float, confidence: float, trials: int, seed: int) -> dict:
    """The ideal audit over ``m`` canary users of ``rows`` rows each under DP at the unit ``unit``: the median and
    10 / 90 % quantiles of the simulated bounds, each with its Monte Carlo interval, and the median count right."""
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r}: one of {', '.join(UNITS)}")
    counts = ideal_counts(sample_rate, steps, sigma, m=m, k_pos=k_pos, k_neg=0, trials=trials, seed=seed,
                          rows=rows if unit == "example" else 1)
    return {"unit": unit, "rows": rows, "m": m, "k_pos": k_pos,
            "median_correct": float(sorted(c[2] for c in counts)[len(counts) // 2]),
            **ideal_summaries(counts, delta, confidence)}


def plan_ideals(*, epsilon: float, delta: float, sample_rate: float, steps: int, rows, m: int, k_pos: int,
                confidence: float, trials: int, seed: int, accountant: str = "prv") -> dict:
    """At one (epsilon, delta, q, T): sigma from the accountant, then for each number of rows per canary user the
    ideal user-level audit under example-level and under user-level DP-SGD (``user_ideal``), and what r guesses, all
    right, could show at most (the test's cap)."""
    from ...shared.bounds.one_run import epsilon_lower_bound

    sigma = calibrate_sigma(epsilon, delta, sample_rate, steps, accountant)
    out = {"epsilon": epsilon, "delta": delta, "sample_rate": sample_rate, "steps": steps, "noise_multiplier": sigma,
           "accountant": accountant, "m": m, "k_pos": k_pos, "confidence": confidence, "trials": trials,
           "cap_eps_lb": epsilon_lower_bound(m, k_pos, k_pos, delta, confidence), "rows": []}
    for k in rows:
        for unit in UNITS:
            key = f"{unit}:{k}"
            out["rows"].append(user_ideal(sample_rate, steps, sigma, unit=unit, rows=k, m=m, k_pos=k_pos,
                                          delta=delta, confidence=confidence, trials=trials,
                                          seed=stream("studies.user_level_ideal").int_seed(seed, key=key)))
    return out


#: the comparison's three mechanisms: run name -> (mechanism, DP unit or None)
MECHANISMS = {"ul_example": ("example-level DP-SGD", "example"), "ul_user": ("user-level DP-SGD", "user"),
              "ul_nondp": ("no DP", None)}
#: the keys of a reports/user_level.json row, as metrics.json names them
ROW_KEYS = ("mechanism", "unit", "epsilon", "delta", "k", "m", "r", "v", "eps_lb_95", "ideal_eps_lb_95_median",
            "ideal_percentile", "canary_user_auroc", "canary_user_auroc_ci95", "members", "non_members",
            "valid_perplexity", "seeds", "seed_status", "design_commit")


def mechanism_run(mechanism: str, design: UserLevelPlanParams, k: int, seed: int) -> dict:
    """``runs.<name>`` of one mechanism at the design's (epsilon, delta, q, T), k rows per audit user and ``seed``,
    over the recipe the preset gives every mechanism (dataset, optimizer, lengths: presets/user_level.args)."""
    _, unit = MECHANISMS[mechanism]
    dp = ({"enabled": True, "epsilon": design.epsilon, "delta": design.delta, "accountant": design.accountant,
           "unit": unit, **({"rows_per_user": k} if unit == "user" else {})} if unit else {"enabled": False})
    return {"sample_rate": design.sample_rate, "steps": design.steps, "seed": seed, "canaries": True,
            "user_canaries": True, "dp": dp}


def comparison_rows(metrics: Metrics, design_commit: str | None) -> list[dict]:
    """One row per mechanism and audit unit from one experiment's metrics.json (its ``Metrics`` record): the
    example-level test (audit.primary over the new-token canaries; ``canary_user_auroc`` is then the per-canary AUROC
    of its attack) and the user-level test over the audit users (``audit_user``)."""
    rows = []
    for run, (label, _) in MECHANISMS.items():
        r = metrics.runs[run]
        pv, u, p = r.privacy, r.audit_user, r.audit_primary
        if u is None or p is None:
            raise DataError(f"runs.{run}: no {'audit_user' if u is None else 'audit_primary'} (the comparison needs "
                            "the user-level and the example-level test of every mechanism)")
        per_canary = r.attacks[p.attack][p.kind]
        common = {"mechanism": label, "epsilon": pv.epsilon_spent if pv.dp else None,
                  "valid_perplexity": r.utility.valid_perplexity}
        for unit, test, auroc, ci, members in (
                ("example", p, per_canary.auroc, per_canary.auroc_ci95, (per_canary.members, per_canary.non_members)),
                ("user", u, u.canary_user_auroc, u.canary_user_auroc_ci95, (u.members, u.non_members))):
            rows.append({**common, "unit": unit, "delta": test.delta, "k": u.k if unit == "user" else 1,
                         "m": test.m, "r": test.r, "v": test.v, "eps_lb_95": test.bounds["eps_lb_95"],
                         "ideal_eps_lb_95_median": test.bounds["ideal_eps_lb_95_median"] if pv.dp else None,
                         "ideal_percentile": test.ideal_percentile if pv.dp else None, "canary_user_auroc": auroc,
                         "canary_user_auroc_ci95": ci, "members": members[0], "non_members": members[1],
                         "seeds": list(test.seeds), "seed_status": test.seed_status.value,
                         "design_commit": design_commit})
    return [{k: row[k] for k in ROW_KEYS} for row in rows]
