"""The user-level comparison's plan (reports/user_level_plan.json, flows/user_level_plan.py): what a one-run audit
over canary users could show at best under example-level and under user-level DP-SGD, computed before any run."""
from __future__ import annotations

import json
from pathlib import Path

from ...audit.schema import BoundKeys, mc_interval_key
from ...core.formatting import Table, fmt
from ..render import Section


def user_level_section(plan: Path | None) -> Section | None:
    if plan is None or not plan.is_file():
        return None
    data = json.loads(plan.read_text())
    d, ideals = data["design"], data["ideals"]
    k = BoundKeys(d["confidence"])
    t = Table(["DP unit", "rows per canary user (k)", f"ideal {k.label} median (Monte Carlo interval)",
               "ideal p10 – p90", "median right of guesses"])
    for r in ideals["rows"]:
        lo, hi = r[mc_interval_key(k.ideal())]
        t.rows.append([f"{r['unit']}-level DP-SGD", r["rows"], f"{fmt(r[k.ideal()])} ({fmt(lo)}–{fmt(hi)})",
                       f"{fmt(r[k.ideal(summary='p10')])} – {fmt(r[k.ideal(summary='p90')])}",
                       f"{fmt(r['median_correct'], 0)} of {d['k_pos']}"])
    return Section("Users: the user-level comparison's plan (ideals before any run)", tables=[t], paragraphs=[
        f"Planned before any user-level run (studies.yaml `user_level`, committed at "
        f"`{(data.get('design_commit') or '?')[:10]}`): at (ε, δ) = ({fmt(d['epsilon'], 2)}, {d['delta']:g}), "
        f"q = {d['sample_rate']:g} and T = {d['steps']} for both units (σ = {fmt(ideals['noise_multiplier'], 4)} from "
        f"the {ideals['accountant'].upper()} accountant; each mechanism's ε is about its own unit), the one-run test "
        f"over m = {d['m']} canary users, each a fair coin, guessing \"in\" for the {d['k_pos']} highest per-user "
        "scores. "
        f"A user's k rows share one secret: under example-level DP each row is sampled on its own, so a member user "
        f"adds Bin(kT, q) clipped gradients against the same noise and the guarantee it gets is group privacy (about "
        f"kε); under user-level DP the user is sampled once and clipped as one unit, a single row's Bin(T, q). "
        f"Assumption: {data['assumption']}. {d['k_pos']} guesses, all right, can show at most "
        f"{k.label} = {fmt(ideals['cap_eps_lb'])} ({ideals['trials']} simulated audits per row). "
        f"Prediction, stated before the runs: {d['prediction']} The confirming runs (seeds "
        f"{', '.join(map(str, d['confirmation_seeds']))}) and the user-level canary audit that scores them are not "
        "run yet: nothing here is a measurement."])
