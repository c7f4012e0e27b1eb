"""Users: the one-run audit over canary users of the runs trained on them (metrics.json ``audit_user``), and the
user-level comparison's plan (reports/user_level_plan.json, flows/user_level_plan.py): what such an audit could show
at best under example-level and under user-level DP-SGD, computed before any run."""
from __future__ import annotations

from pathlib import Path

from ...audit.schema import RunMetrics
from ...shared.bounds.keys import BoundKeys, mc_interval_key
from ...shared.core.formatting import Table, ci, fmt
from ...shared.studies.user_level import UserLevelExperiment, UserLevelTable, read_plan, read_table
from ..figures import mc, status_words
from ..render import Section


def user_audit_section(runs: dict[str, RunMetrics], keys: list[BoundKeys]) -> Section | None:
    """One row per run with the user-level test: its mechanism and unit, the test's counts and bounds, the ideal
    of the same test under the run's mechanism (DP runs) and the per-user AUROC."""
    tested = {run: r.audit_user for run, r in runs.items() if r.audit_user is not None}
    if not tested or not keys:
        return None
    t = Table(["run", "mechanism", "canary users (m), rows each (k)", "right of guesses",
               *[f"{k.label} (δ)" for k in keys], f"ideal {keys[0].label} median; this count's percentile",
               "per-user AUROC [95% CI]", "seeds"])
    for run, u in tested.items():
        pv = runs[run].privacy
        mech = f"{u.mechanism_unit}-level DP, accountant ε {fmt(pv.epsilon_spent, 2)}" if pv.dp else "no DP"
        ideal = (f"{mc(u, keys[0].ideal(), 2)}; {mc(u, 'ideal_percentile', 1)}"
                 if u.bounds.get(keys[0].ideal()) is not None else "– (no DP)")
        t.rows.append([run, mech, f"{u.m}, {u.k}", f"{u.v} of {u.r}",
                       *[f"{fmt(u.bounds[k.eps_lb], 2)} ({u.delta:.0e})" for k in keys], ideal,
                       ci(u.canary_user_auroc, u.canary_user_auroc_ci95), status_words(u)])
    return Section("Users: the one-run audit over canary users", tables=[t], paragraphs=[
        "Each canary user (canaries.audit_users) is a fair seeded coin; a held-in user's k rows, each a random prefix "
        "before the user's own new token, were all trained on, a held-out user's none. A user's score is the sum of "
        "its rows' scores under audit.user.attack, and the test guesses \"in\" for the audit.user.k_pos highest, "
        "fixed in params before any score. The bound is the Steinke et al. (2023) lower bound over users "
        "(assumption-free): it bounds the ε of a guarantee whose unit is the person. Under user-level DP the "
        "accountant's ε is such a guarantee, so the bound must stay below it; under example-level DP a user's k rows "
        "get group privacy only, and the bound may exceed the accountant's ε. The ideal is the same test under the "
        "linear last-iterate model (heuristic; a real audit can exceed it), with the run's own q, T, σ and unit."])


def user_comparison_section(path: Path | None) -> Section | None:
    """The user-level comparison's committed table (reports/user_level.json): per experiment (k rows per audit user,
    one seed) a row per mechanism and audit unit, with the experiment's commit (its lineage: `dvc exp show`)."""
    if path is None or not path.is_file():
        return None
    data = read_table(path)
    k = BoundKeys(data.design.confidence)
    t = Table(["experiment (commit)", "mechanism", "accountant ε", "audit unit", "k", "right of guesses (m)",
               k.label, f"ideal {k.label} median (percentile)", "AUROC [95% CI]", "valid ppl", "seeds"])
    for e in data.experiments:
        for r in e.rows:
            ideal = ("–" if r.ideal_eps_lb_95_median is None else
                     f"{fmt(r.ideal_eps_lb_95_median, 2)} ({fmt(r.ideal_percentile, 1)})")
            t.rows.append([f"{e.experiment} ({e.commit[:10]})", r.mechanism,
                           "–" if r.epsilon is None else fmt(r.epsilon, 2), r.unit, r.k,
                           f"{r.v} of {r.r} ({r.m})", fmt(r.eps_lb_95, 2), ideal,
                           ci(r.canary_user_auroc, r.canary_user_auroc_ci95), fmt(r.valid_perplexity, 1),
                           f"{', '.join(map(str, r.seeds))} ({r.seed_status})"])
    done = len(data.experiments)
    return Section("Users: the same ε, three mechanisms, both audit units", tables=[t] if done else [], paragraphs=[
        f"The comparison planned in studies.yaml `user_level` (design committed at "
        f"`{(data.design_commit or '?')[:10]}`, before any run): example-level DP-SGD, user-level DP-SGD and the "
        f"non-DP run on one recipe ({data.recipe}), each trained on the new-token canaries and the audit users and "
        "audited at the example level (audit.primary's test over the new-token canaries) and at the user level (the "
        "test over canary users, k rows each). Each experiment is one seed; its commit is the DVC experiment that "
        "holds its params, dvc.lock and metrics; the params.yaml and dvc.lock are kept beside the table "
        f"({path.with_suffix('').name}/<experiment>.params.yaml, .dvc.lock). Prediction, stated before the runs: "
        f"{data.design.prediction} "
        + (tested_words(data) if done else "No experiment is recorded yet: nothing here is a measurement.")])


def tested_words(data: UserLevelTable) -> str:
    """Which of the design's k have a confirmation run (the seed's first run, under this design), which only a
    development look, and which none: the prediction is tested as a whole only when every k is confirmed."""
    def confirmation(e: UserLevelExperiment) -> bool:
        return all(r.seed_status == "confirmation" for r in e.rows)

    confirmed = sorted((e.k, e.seed) for e in data.experiments if confirmation(e))
    looks = [e.experiment for e in data.experiments if not confirmation(e)]
    missing = [k for k in data.design.rows if k not in {k for k, _ in confirmed}]
    out = (f"{len(data.experiments)} experiment(s) recorded; confirmed (each its seed's first run): "
           + (", ".join(f"k = {k} at seed {seed}" for k, seed in confirmed) or "none") + ". ")
    if looks:
        out += f"Development looks, shown but not counted: {', '.join(looks)}. "
    return out + (f"Not yet confirmed: k = {', '.join(map(str, missing))}, so the prediction is not yet tested as a "
                  "whole." if missing else "Every k of the design is confirmed, so the prediction is tested as a "
                  "whole, one seed per k (not pooled over seeds).")


def user_level_section(plan: Path | None) -> Section | None:
    if plan is None or not plan.is_file():
        return None
    data = read_plan(plan)
    d, ideals = data.design, data.ideals
    k = BoundKeys(d.confidence)
    t = Table(["DP unit", "rows per canary user (k)", f"ideal {k.label} median (Monte Carlo interval)",
               "ideal p10 – p90", "median right of guesses"])
    for r in ideals.rows:
        s = r.summaries
        lo, hi = s[mc_interval_key(k.ideal())]
        t.rows.append([f"{r.unit}-level DP-SGD", r.rows, f"{fmt(s[k.ideal()])} ({fmt(lo)}–{fmt(hi)})",
                       f"{fmt(s[k.ideal(summary='p10')])} – {fmt(s[k.ideal(summary='p90')])}",
                       f"{fmt(r.median_correct, 0)} of {d.k_pos}"])
    return Section("Users: the user-level comparison's plan (ideals before any run)", tables=[t], paragraphs=[
        f"Planned before any user-level run (studies.yaml `user_level`, committed at "
        f"`{(data.design_commit or '?')[:10]}`): at (ε, δ) = ({fmt(d.epsilon, 2)}, {d.delta:g}), "
        f"q = {d.sample_rate:g} and T = {d.steps} for both units (σ = {fmt(ideals.noise_multiplier, 4)} from "
        f"the {ideals.accountant.upper()} accountant; each mechanism's ε is about its own unit), the one-run test "
        f"over m = {d.m} canary users, each a fair coin, guessing \"in\" for the {d.k_pos} highest per-user "
        "scores. "
        f"A user's k rows share one secret: under example-level DP each row is sampled on its own, so a member user "
        f"adds Bin(kT, q) clipped gradients against the same noise and the guarantee it gets is group privacy (about "
        f"kε); under user-level DP the user is sampled once and clipped as one unit, a single row's Bin(T, q). "
        f"Assumption: {data.assumption}. {d.k_pos} guesses, all right, can show at most "
        f"{k.label} = {fmt(ideals.cap_eps_lb)} ({ideals.trials} simulated audits per row). "
        f"Prediction, stated before the runs: {d.prediction} Nothing in this table is a measurement: the "
        f"confirming runs (seeds {', '.join(map(str, d.confirmation_seeds))}) that have run are in the section "
        "above (the same ε, three mechanisms)."])
