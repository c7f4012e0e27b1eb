"""The primary one-run test (its rule fixed in params before any score) of every run with canaries (the headline
ε̂), assumption-free and Gaussian-DP."""
from __future__ import annotations

from ...audit.schema import Pooled, Primary, SingleRun
from ...shared.bounds.keys import BoundKeys
from ...shared.core.formatting import Table, fmt
from ..figures import is_confirmation, mc, status_words
from ..inputs import Inputs
from ..render import Section

#: The Gaussian curve is not DP-SGD's at q < 1, in numbers: at the dp_eps8 recipe's q = 0.2297, T = 10, sigma = 0.8154
#: (accountant epsilon 8 at delta 1e-5), the epsilon at delta 0.1 of the Gaussian curve matched to (8, 1e-5)
#: (``stages.shared.bounds.gdp``: gdp_epsilon(gdp_mu(8, 1e-5), 0.1) = 2.801) and of the run's composed
#: Poisson-subsampled
#: Gaussian curve (opacus PRV, ``stages.shared.bounds.curve.accountant_epsilon`` = 1.519). The report cannot call that
#: code
#: (its DVC deps are exactly its import closure, and the accountant is the audit's), so the figures are written here
#: and tests/report/test_wording.py recomputes them with it.
GAUSSIAN_VS_COMPOSED = {"q": 0.23, "steps": 10, "epsilon": 8, "delta": "10⁻⁵", "at_delta": 0.1, "gaussian": 2.80,
                        "composed": 1.52}


def gaussian_vs_composed() -> str:
    g = GAUSSIAN_VS_COMPOSED
    return (f"at q = {g['q']}, T = {g['steps']} the Gaussian curve matched to ({g['epsilon']}, {g['delta']}) gives "
            f"ε {g['gaussian']:.2f} at δ = {g['at_delta']} where the run's composed subsampled-Gaussian curve (the "
            f"accountant's) gives {g['composed']:.2f}")


def _pair(p: Primary | Pooled | SingleRun, stat: str, bounds: list[BoundKeys]) -> str:
    """One statistic of the test at every confidence, e.g. "1.853 / 1.421"."""
    return " / ".join(fmt(p.bounds.get(b.stat(stat))) for b in bounds)


def audit_section(inp: Inputs) -> Section:
    bounds = inp.bounds
    label = " / ".join(b.label for b in bounds)
    at = Table(["run", "accountant ε (δ)", "primary test", "threat model", "seeds", "audit δ", "m (members)",
                "right of guesses", f"{label} assumption-free (Steinke)", f"{label} own curve assumed",
                f"{label} Gaussian curve assumed (μ-GDP)", "percentile in ideal"])
    for run, r in inp.runs.items():
        p = r.audit_primary
        if p is None:
            continue
        pv = r.privacy
        acct = f"{fmt(pv.epsilon_spent)} ({pv.accountant}, δ={pv.delta:.2g})" if pv.dp else "∞ (no DP)"
        group = r.attacks.get(p.attack, {}).get(p.kind)
        members = group.members if group is not None else None
        at.rows.append([run, acct, f"{p.attack} on {p.kind}, k₊={p.k_pos}, k₋={p.k_neg}",
                        inp.threats.get(p.attack, "?"), _status(p), f"{p.delta:.2g}", f"{p.m} ({members})",
                        f"{p.v} of {p.r}",
                        _pair(p, "eps_lb", bounds),
                        _pair(p, "curve_eps_lb", bounds) if pv.dp else "– (no DP)",
                        _pair(p, "gdp_eps_lb", bounds),
                        mc(p, "ideal_percentile", 1) if p.ideal_percentile is not None else "–"])
    if not at.rows:
        return Section("Audit: the primary test", paragraphs=["No run has canaries: nothing to audit."])
    return Section("Audit: the primary test (headline ε̂)", tables=[at, *pooled_tables(inp)], paragraphs=[
        "One test per run, its rule fixed in params (`audit.primary`) before any score. Its status is the seed "
        "ledger's (reports/audit_study/seed_ledger.json): a **confirmation** only on a seed set whose first recorded "
        "run is this design, on seeds committed before it; a set run before under another design, or holding a seed "
        "a design choice saw (`audit.seeds.development`), gives a **development look**, which is not evidence. "
        "The assumption-free column is Steinke, Nasr and Jagielski's bound (valid for any (ε, δ)-DP training run). "
        "The Gaussian column (Mahloujifar, Melis and Chaudhuri 2025, f-DP in one run) is the largest ε at which "
        "the Gaussian mechanism calibrated to (ε, δ) is rejected by the same guesses: it **rests on the assumption "
        "that the run's trade-off curve is Gaussian**, which is exact only at q = 1; DP-SGD at q < 1 composes a "
        f"subsampled Gaussian whose curve is not Gaussian ({gaussian_vs_composed()}). The own-curve column tests the "
        "composed Poisson-subsampled Gaussian of the run's q and T instead (the accountant's model with σ unknown) "
        "and reports the accountant's ε at the smallest σ′ it rejects (docs/method.md). Percentile in ideal: where "
        "the run's count falls among simulated audits of ideal canaries at its q, T, σ (heuristic), ± its Monte "
        "Carlo standard error (binomial, over the simulated trials).",
        *pooled_paragraphs(inp)])


def _status(p: Primary | Pooled | SingleRun) -> str:
    seeds = ", ".join(map(str, p.seeds or [])) or "?"
    return f"{seeds}: " + ("confirmation" if is_confirmation(p) else "development look")


def pooled_tables(inp: Inputs) -> list[Table]:
    """The pooled test of each recipe, then the single runs it pools (same rule)."""
    pooled = inp.metrics.pooled
    if not pooled:
        return []
    bounds = inp.bounds
    label = " / ".join(b.label for b in bounds)
    t = Table(["recipe (pooled)", "runs", "seeds", "accountant ε (δ)", "rule per run", "m", "right of guesses",
               f"{label} assumption-free", f"{label} own curve assumed", f"{label} Gaussian curve assumed",
               f"ideal {bounds[0].label} median ± MC error [p10, p90]", "percentile in ideal ± MC error",
               "simulated trials"])
    s = Table(["recipe", "run", "seeds", "m", "right of guesses", f"{label} assumption-free",
               f"{label} Gaussian curve assumed", "percentile in ideal ± MC error"])
    for recipe, p in pooled.items():
        b0, trials = bounds[0], p.ideal_trials
        t.rows.append([recipe, len(p.runs), _status(p), f"{fmt(p.accountant_epsilon)} (δ={p.delta:.2g})",
                       f"k₊={p.k_pos_per_run}, k₋={p.k_neg_per_run}", p.m, f"{p.v} of {p.r}",
                       _pair(p, "eps_lb", bounds), _pair(p, "curve_eps_lb", bounds), _pair(p, "gdp_eps_lb", bounds),
                       f"{mc(p, b0.ideal())} [{fmt(p.bounds.get(b0.ideal(summary='p10')))}, "
                       f"{fmt(p.bounds.get(b0.ideal(summary='p90')))}]", mc(p, "ideal_percentile", 1), trials])
        for single in p.single_runs:
            s.rows.append([recipe, single.run, _status(single), single.m, f"{single.v} of {single.r}",
                           _pair(single, "eps_lb", bounds), _pair(single, "gdp_eps_lb", bounds),
                           mc(single, "ideal_percentile", 1, trials)])
    return [t, s]


def pooled_paragraphs(inp: Inputs) -> list[str]:
    out = []
    for recipe, p in inp.metrics.pooled.items():
        e = p.efficiency
        out.append(
            f"**Pooled test of {recipe}** ({len(p.runs)} runs: {', '.join(p.runs)}). Each run is the recipe "
            "trained with everything random drawn from its own seed (canary draw and coins, text sample, sampler, "
            "noise), and each canary is in one run only, so together they are one mechanism that is (ε, δ)-DP in "
            "each canary (parallel composition); one test over the union of their canaries, with the rule fixed in "
            "params (`audit.pooled`) before any replica existed, is a valid one-run audit. "
            f"Seed status: {status_words(p)}. Assumption: the runs' "
            "random streams are independent"
            + (f" (every stream derived from its run's seed and its name: {p.streams})" if p.streams else
               " (the stream derivation was not recorded: runs before the SeedSequence derivation drew a run's noise "
               "like the next seed's initialisation, so they were not)")
            + " and their seeds unknown to the adversary"
            + ("" if p.secure_rng else " (here they are seeded from params: the accountant's ε, and so this "
               "bound's comparison with it, is about a mechanism whose seed is secret)")
            + ". The own-curve column tests the composed Poisson-subsampled Gaussian of this q and T: it reports "
            f"the accountant's ε at the smallest σ′ the counts reject "
            f"(σ′ ≥ {fmt(p.bounds.get(inp.bounds[0].stat('curve_sigma_lb')))}); "
            f"it assumes {p.curve_assumption}. "
            f"Where the runs fall in the ideal: each run's count among the ideal audit's simulated counts "
            f"(percentile, never a ratio of one run's bound to the ideal's median); median over the "
            f"{e.n} runs {fmt(e.median, 1)}, distribution-free interval [{fmt(e.low, 1)}, "
            f"{fmt(e.high, 1)}] with coverage {fmt(100 * e.coverage, 0)}% at this many runs. The ideal's "
            f"median carries its Monte Carlo interval over the {p.ideal_trials} simulated trials "
            "(order statistics: the bound moves in steps, so a median on a step's edge may be either step), each "
            "percentile its binomial standard error.")
    return out
