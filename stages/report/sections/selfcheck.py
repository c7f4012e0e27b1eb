"""The report's ``selfcheck`` section: the DP engine's own audit (reports/selfcheck.json, ``leakaudit selfcheck``,
stages/finetune/selfcheck.py), with what it checked and what it did not."""
from __future__ import annotations

import json
from pathlib import Path

from ...core.formatting import Table
from ..render import Section


def selfcheck_section(path: Path | None) -> Section | None:
    if not path or not path.is_file():
        return None
    data = json.loads(path.read_text())
    d = data["design"]
    t = Table(["clipping mode", "paradigm", "processes", "accountant ε", "ε̂95 (Steinke)", "GDP ε̂95",
               f"GDP ε̂ at {data['rows'][0]['confidence_999']:.5f}" if data["rows"] else "GDP ε̂ (strict)",
               "ideal GDP ε̂95", "right of guesses", "verdict"])
    for r in data["rows"]:
        t.rows.append([r["mode"], r["paradigm"], r["processes"], r["accountant_epsilon"], r["eps_lb_95"],
                       r["gdp_eps_lb_95"], r["gdp_eps_lb_999"], r["ideal"], f"{r['correct']} of {r['guesses']}",
                       "FLAGGED: spends more than its accountant says" if r["flagged"] else "pass"])
    verdict = ("Every configuration passes: no test rejects the accountant's claim." if data["all_pass"] else
               "At least one configuration is FLAGGED: the engine spends more privacy than its accountant reports "
               "there; no DP figure of this report from that configuration should be trusted.")
    return Section("DP engine self-check", tables=[t], paragraphs=[
        f"Before trusting any ε in this report: the project's own DP training path, audited with {d['canaries']} "
        f"gradient canaries (a probe model in which each canary's gradient lies in coordinates only it touches, "
        f"clipped: norm far above C = {d['max_grad_norm']}), each a member by a fair seeded coin, trained at "
        f"q = {d['sample_rate']}, T = {d['steps']} under a claimed ({d['epsilon']}, {d['delta']})-DP with "
        f"DP-SGD; guesses: the {d['guesses_in']} highest movements \"in\", the {d['guesses_out']} lowest \"out\" "
        "(fixed in params.yaml `selfcheck` before any run). At q = 1 DP-SGD is the Gaussian mechanism, so the "
        "accountant's claim is exactly μ-GDP and the GDP one-run test checks the claim itself (no further "
        f"assumption); a configuration is flagged when it rejects that claim at 1 − {d['alpha']}/{d['family']} "
        "(Bonferroni over the configurations checked). The Steinke bound assumes nothing and is looser (it degrades "
        "with m·δ). The ideal is what exact Gaussian scores of a correct engine give (median of a seeded "
        "simulation). " + verdict
        + (f" The guard's power: an engine adding half the noise it books is flagged in "
           f"{data['power']['flag_rate']:.0%} of {data['power']['trials']} simulated runs at this family's level "
           "(exact Gaussian scores); a smaller break can pass." if "power" in data else ""),
        f"Checked: {data['checked']}. Not checked: {data['not_checked']}. Deliberately broken engines (half the "
        "noise, one module unclipped, the accountant told q/10, noise after the all-reduce on one rank) are flagged "
        "by seeded tests (tests/finetune/test_selfcheck.py; flag rates over fresh seeds: "
        "benchmarks/selfcheck_mutants.py)."])
