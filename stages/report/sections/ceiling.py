"""What the audit could show: accountant ε, last-iterate ε and the ideal audit next to the measured one."""
from __future__ import annotations

from ...audit.schema import Planned
from ...shared.core.formatting import Table, fmt
from ..figures import mc
from ..inputs import Inputs
from ..plots import ceiling_plot
from ..render import Section


def ceiling_section(inp: Inputs) -> Section | None:
    """Per DP run (and planned regime): accountant ε, last-iterate ε, the ideal audit and the measured one."""
    bounds = inp.bounds
    if not bounds:
        return None
    first, label = bounds[0], bounds[0].label
    t = Table(["run", "q", "T", "σ", "δ", "accountant ε", "last-iterate ε (heuristic)",
               f"ideal {label} median ± MC error [p10, p90]", f"measured {label}", "percentile in ideal ± MC error",
               f"ideal GDP {label} median ± MC error [p10, p90]", f"measured GDP {label}", "simulated trials"])
    rows = []
    regimes = [(run, r.audit_primary, r.privacy) for run, r in inp.runs.items()
               if r.audit_primary is not None and r.audit_primary.last_iterate_epsilon is not None]
    regimes += [(f"{name} (planned, not run)", p, p) for name, p in inp.metrics.planned.items()]
    for name, p, pv in regimes:  # pv: the run's privacy record, or the planned regime itself (its q, T, σ)
        ideal = [p.bounds[first.ideal("eps_lb", q)] for q in ("p10", "median", "p90")]
        ideal_gdp = [p.bounds[first.ideal("gdp_eps_lb", q)] for q in ("p10", "median", "p90")]
        percentile = None if isinstance(p, Planned) else p.ideal_percentile  # a planned regime has no measured count
        t.rows.append([name, pv.sample_rate, pv.steps, pv.noise_multiplier, f"{p.delta:.2g}",
                       p.accountant_epsilon, p.last_iterate_epsilon,
                       f"{mc(p, first.ideal())} [{fmt(ideal[0])}, {fmt(ideal[2])}]", p.bounds.get(first.eps_lb),
                       mc(p, "ideal_percentile", 1) if percentile is not None else "–",
                       f"{mc(p, first.ideal('gdp_eps_lb'))} [{fmt(ideal_gdp[0])}, {fmt(ideal_gdp[2])}]",
                       p.bounds.get(first.gdp_eps_lb), p.ideal_trials])
        rows.append({"name": name, "accountant": p.accountant_epsilon, "last_iterate": p.last_iterate_epsilon,
                     "ideal": ideal, "ideal_gdp": ideal_gdp, "measured": p.bounds.get(first.eps_lb),
                     "measured_gdp": p.bounds.get(first.gdp_eps_lb)})
    if not rows:
        return None
    png = inp.plots_dir / "ceiling.png"
    ceiling_plot(rows, label, png)
    return Section("What the audit could show: the attainable ceiling", tables=[t], images=[(
        f"Accountant ε, last-iterate ε and the ideal one-run {label} (median, 10–90% of simulated audits) next to "
        "the measured one, per DP run and planned regime", png)], paragraphs=[
        "A low ε̂ next to a large accountant ε is not by itself a failed audit: at a run's q, T and σ even a perfect "
        "canary is limited. The linear last-iterate model (Steinke et al. 2025) — a member canary's statistic is "
        "Bin(T, q) + N(0, Tσ²), a non-member's N(0, Tσ²) — gives a **heuristic** ε (only the final model is "
        "released, gradients along one fixed direction; the accountant covers every intermediate model, so it is "
        "never smaller). Simulating the primary test (same m, k₊, k₋, δ, confidence) on canaries that follow "
        "that model gives the ideal ε̂: the median of a heuristic simulation for an ideal white-box statistic, a "
        "reference point, not a limit (a valid audit can exceed it). The ideal is a distribution: a run's count is "
        "read by its percentile in it, not by one run's bound divided by its median. Each simulated median "
        "carries its Monte Carlo interval over the simulated trials (order statistics: a bound moves in steps, so a "
        "median on a step's edge may be either step), each percentile its binomial standard error. More exposures "
        "per canary (q·T) raise the ceiling; "
        "the planned rows are regimes not run here (σ from the accountant) — see docs/running.md, Experiments "
        "(presets/gpu_dp_audit.args)."])
