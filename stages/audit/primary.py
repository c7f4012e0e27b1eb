"""Pre-registered and exploratory one-run bounds of a run.

* The primary test (``audit.primary``: one attack, one canary kind, k_pos, k_neg, confidences) comes from
  params, to be chosen before any score is seen (the bound assumes it); its Steinke bound (assumption-free)
  and Gaussian-DP bound (resting on a Gaussian trade-off curve) are the run's headline. For a DP run it sits
  next to the accountant's epsilon, the last-iterate epsilon and the simulated ideal audit of the same test
  (``ceiling.py``).
* The exploratory family is every membership attack x canary kind x (k_pos, k_neg) of ``audit.exploratory``.
  Attacks that rank a kind's canaries identically (e.g. min-k on one-token secrets ranks exactly like loss) give
  the same guesses for every k, so they are one test, reported once with the others named; which attacks do is
  declared where each attack is registered (``ranks_like``), never inferred from the scores, and checked. Each
  of the N distinct tests is run at confidence 1 - (1 - c) / N (Bonferroni), so even the largest of them
  holds at confidence c; no uncorrected maximum is ever reported.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from ..finetune.schema import PrivacyRecord
from ..shared.bounds.ceiling import ideal_audit, ideal_counts, last_iterate_epsilon, percentile_mc
from ..shared.bounds.curve import ASSUMPTION as CURVE_ASSUMPTION
from ..shared.bounds.curve import curve_epsilon_lower_bound
from ..shared.bounds.gdp import gdp_epsilon, gdp_mu_lower_bound
from ..shared.bounds.keys import BoundKeys, Bounds, clip_guesses
from ..shared.bounds.one_run import epsilon_lower_bound, guesses
from ..shared.core.errors import ConfigError, DataError

#: kind -> attack -> (item ids, scores, members), canary kinds only
Canaries = dict[str, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]


def aligned(by_attack: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict:
    """Every attack's (ids, scores, members) in the first attack's item order (attacks score the same items)."""
    first = next(iter(by_attack.values()))[0]
    out = {}
    for attack, (ids, s, y) in by_attack.items():
        if not np.array_equal(ids, first):
            pos = {i: n for n, i in enumerate(ids.tolist())}
            if set(pos) != set(first.tolist()):
                raise ValueError(f"attack {attack} scored other items than {next(iter(by_attack))}")
            order = np.array([pos[i] for i in first.tolist()])
            ids, s, y = ids[order], s[order], y[order]
        out[attack] = (ids, s, y)
    return out


def identical_rankings(by_attack: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[list[str]]:
    """Attacks grouped by the ranking they induce on the items (dense ranks equal), in attack order."""
    classes: list[tuple[np.ndarray, list[str]]] = []
    for attack, (_, s, _) in aligned(by_attack).items():
        ranks = rankdata(s, method="dense")
        for ref, names in classes:
            if np.array_equal(ref, ranks):
                names.append(attack)
                break
        else:
            classes.append((ranks, [attack]))
    return [names for _, names in classes]


def declared_classes(kind: str, by_attack: dict, declared: dict[str, list[list[str]]]) -> list[list[str]]:
    """The kind's attacks grouped as their registrations declare (``ranks_like``, written with the scores:
    ``attack.schema.same_ranking``; attacks not declared stand alone), in attack order. The family size must not
    depend on the scores, so groups are declared, not found; a declared group whose scores do not rank the canaries
    identically is an error, not a silent regrouping."""
    classes: list[list[str]] = []
    where: dict[str, list[str]] = {}
    for group in declared.get(kind, ()):
        present = [a for a in group if a in by_attack]
        for a in present:
            where[a] = present
    for attack in by_attack:
        if attack in where:
            if where[attack][0] == attack or where[attack][0] not in by_attack:
                classes.append(where[attack])
        else:
            classes.append([attack])
    for names in classes:
        if len(names) > 1 and len(identical_rankings({a: by_attack[a] for a in names})) > 1:
            raise DataError(f"attacks {names} are declared to rank the {kind} canaries identically "
                            "(their registrations' ranks_like) but do not: declare only attacks that must, e.g. loss "
                            "and min_k on one-token secrets")
    return classes


def bounds(m: int, r: int, v: int, delta: float, confidences, gdp: bool = True) -> dict:
    """eps_lb_<c> (Steinke) and, with ``gdp``, gdp_eps_lb_<c> / gdp_mu_lb_<c> (Gaussian trade-off) of (m, r, v)."""
    out = {}
    for c in confidences:
        eps = epsilon_lower_bound(m, r, v, delta, c) if r else 0.0
        mu = (gdp_mu_lower_bound(m, r, v, c) if r else 0.0) if gdp else None  # searched for once, not twice
        gdp_eps = (gdp_epsilon(mu, delta) if mu > 0 else 0.0) if gdp and delta > 0 else None
        out.update(Bounds(c, eps, mu, gdp_eps).to_metrics(gdp))
    return out


def primary_test(canaries: Canaries, params, delta: float, run: str, dp: bool = True) -> dict | None:
    """The pre-registered test's counts and bounds; None for a run without canaries. ``dp``: the run holds a DP
    guarantee (its own ``dp.enabled``, or an external run's claim), which params fix before any score: a run
    without one takes ``audit.primary.no_dp``'s rule unless ``audit.primary.runs.<run>`` gives its own."""
    if not canaries:
        return None
    p = params.primary
    if p.kind not in canaries:
        raise ConfigError(f"audit.primary.kind: run {run} has no {p.kind!r} canaries (it has {sorted(canaries)})")
    if p.attack not in canaries[p.kind]:
        raise ConfigError(f"audit.primary.attack: {p.attack!r} was not run on run {run} "
                          f"(its membership attacks: {sorted(canaries[p.kind])})")
    _, s, y = canaries[p.kind][p.attack]
    rule = p.rule(run, dp)
    m, r, v = guesses(s, y, *rule)
    k_pos, k_neg = clip_guesses(*rule, m)
    return {"attack": p.attack, "kind": p.kind, "m": m, "k_pos": k_pos, "k_neg": k_neg, "r": r, "v": v,
            "delta": delta, "precision": v / r if r else None,
            **bounds(m, r, v, delta, p.confidences),
            # the most this test can show: every one of its r guesses right
            **{BoundKeys(c).stat("max_provable_eps_lb"): epsilon_lower_bound(m, r, r, delta, c) if r else 0.0
               for c in p.confidences}}


def curve_bounds(m: int, r: int, v: int, privacy: PrivacyRecord, delta: float, confidences) -> dict:
    """curve_eps_lb_<c> and curve_sigma_lb_<c>: the f-DP test against the run's own (q, T) curve (``curve.py``)."""
    out = {}
    # an external run's record names the trainer's claim: its q and T are read against our PRV accountant
    accountant = privacy.accountant if privacy.accountant in ("prv", "rdp") else "prv"
    for c in confidences:
        res = curve_epsilon_lower_bound(m, r, v, privacy.sample_rate, privacy.steps, delta, c, accountant)
        out[BoundKeys(c).stat("curve_eps_lb")] = res["epsilon"]
        out[BoundKeys(c).stat("curve_sigma_lb")] = res["sigma"]
    return out


def with_ceiling(primary: dict, privacy: PrivacyRecord, params) -> dict:
    """A DP run's primary test next to the accountant's epsilon, the last-iterate epsilon and the ideal audit
    of the same test (same m, k_pos, k_neg, delta, confidences) under that model, with the run's percentile in it
    and every simulated figure's Monte Carlo error. No ratio of the run's bound to the ideal's median is recorded:
    one run's ratio to a median reads a distribution as a number (its percentile is the reading)."""
    q, T, sigma, delta = privacy.sample_rate, privacy.steps, privacy.noise_multiplier, primary["delta"]
    counts = ideal_counts(q, T, sigma, m=primary["m"], k_pos=primary["k_pos"], k_neg=primary["k_neg"],
                          trials=params.ceiling.trials, seed=params.ceiling.seed)
    ideal = ideal_audit(q, T, sigma, m=primary["m"], k_pos=primary["k_pos"], k_neg=primary["k_neg"], delta=delta,
                        confidences=params.confidences, trials=params.ceiling.trials, seed=params.ceiling.seed,
                        counts=counts)
    pct, pct_se = percentile_mc(primary["v"], np.array([c[2] for c in counts]))
    out = {**primary, "accountant_epsilon": float(privacy.epsilon_spent),
           "last_iterate_epsilon": last_iterate_epsilon(q, T, sigma, delta),
           **{k: v for k, v in ideal.items() if k.startswith("ideal_")},
           "ideal_trials": ideal["trials"], "ideal_correct_median": ideal["correct_median"],
           "ideal_percentile": pct, "ideal_percentile_mcse": pct_se,
           **curve_bounds(primary["m"], primary["r"], primary["v"], privacy, delta, params.confidences),
           "curve_assumption": CURVE_ASSUMPTION}
    return out


def exploratory_family(canaries: Canaries, params, delta: float, declared: dict[str, list[list[str]]]) -> dict | None:
    """Every distinct (attack class x kind x guesses) test, each Bonferroni-corrected over the N of them; ``declared``:
    kind -> groups of attacks declared to rank its canaries identically (one test each group)."""
    if not canaries:
        return None
    tests, identical = [], []
    for kind in sorted(canaries):
        data = aligned(canaries[kind])
        for names in declared_classes(kind, canaries[kind], declared):
            if len(names) > 1:
                identical.append({"kind": kind, "attacks": names})
            _, s, y = data[names[0]]
            seen = set()
            for kp, kn in params.grid:
                m, r, v = guesses(s, y, kp, kn)
                eff = clip_guesses(kp, kn, m)
                if eff in seen:  # the grid point clipped to an earlier one (fewer canaries than guesses)
                    continue
                seen.add(eff)
                tests.append({"attack": names[0], "same_ranking": names[1:], "kind": kind, "k_pos": eff[0],
                              "k_neg": eff[1], "m": m, "r": r, "v": v})
    n = len(tests)
    levels = {BoundKeys(c).eps_lb: 1 - (1 - c) / n for c in params.confidences}
    for t in tests:  # keyed by the family-wise confidence the correction keeps
        t.update({key: epsilon_lower_bound(t["m"], t["r"], t["v"], delta, level) if t["r"] else 0.0
                  for key, level in levels.items()})
    best = {}
    for key in levels:
        top = max(tests, key=lambda t: t[key])
        best[key] = {"value": top[key], **{k: top[k] for k in ("attack", "kind", "k_pos", "k_neg", "r", "v")}}
    return {"family_size": n, "correction": "bonferroni", "per_test_confidence": levels,
            "identical_rankings": identical, "tests": tests, "best": best}
