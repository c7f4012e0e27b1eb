"""The pre-registered one-run test of every run with canaries (the headline ε̂), assumption-free and Gaussian-DP."""
from __future__ import annotations

from ...audit.schema import THREAT
from ...core.formatting import Table, fmt
from ..inputs import Inputs, bound_label
from ..render import Section


def _pair(p: dict, prefix: str, bounds: list[str]) -> str:
    return " / ".join(fmt(p.get(prefix + b)) for b in bounds)


def audit_section(inp: Inputs) -> Section:
    bounds = inp.bounds
    label = " / ".join(bound_label(b) for b in bounds)
    at = Table(["run", "accountant ε (δ)", "primary test", "threat model", "audit δ", "m (members)", "right of guesses",
                f"{label} assumption-free (Steinke)", f"{label} Gaussian-DP assumed (μ-GDP)"])
    for run, r in inp.runs.items():
        p = r.get("audit_primary")
        if not p:
            continue
        pv = r["privacy"]
        acct = (f"{fmt(pv.get('epsilon_spent'))} ({pv.get('accountant')}, δ={pv.get('delta'):.2g})"
                if pv.get("dp") else "∞ (no DP)")
        members = r["attacks"].get(p["attack"], {}).get(p["kind"], {}).get("members")
        at.rows.append([run, acct, f"{p['attack']} on {p['kind']}, k₊={p['k_pos']}, k₋={p['k_neg']}",
                        THREAT.get(p["attack"], "?"), f"{p['delta']:.2g}", f"{p['m']} ({members})", f"{p['v']} of {p['r']}",
                        _pair(p, "", bounds), _pair(p, "gdp_", bounds)])
    if not at.rows:
        return Section("Audit: the pre-registered test", paragraphs=["No run has canaries: nothing to audit."])
    return Section("Audit: the pre-registered test (headline ε̂)", tables=[at], paragraphs=[
        "One test per run, named in params (`audit.primary`); its bounds are the run's headline. "
        "The assumption-free column is Steinke, Nasr and Jagielski's bound (valid for any (ε, δ)-DP training run). "
        "The Gaussian-DP column (Mahloujifar, Melis and Chaudhuri 2025, f-DP in one run) is the largest ε at which "
        "the Gaussian mechanism calibrated to (ε, δ) is rejected by the same guesses: it **rests on the assumption "
        "that the run's trade-off curve is Gaussian** (as for DP-SGD's composed noise to a good approximation), "
        "and is tighter for that reason, not a stronger proof."])
