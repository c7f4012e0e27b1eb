"""The report's ``selfcheck`` section: the DP engine's own audit (reports/selfcheck.json, ``leakaudit selfcheck``,
stages/tools/selfcheck/), with what it checked, what it did not, its power and the mutants' flag rates."""
from __future__ import annotations

from pathlib import Path

from ...shared.core.formatting import Table
from ...shared.studies.selfcheck import SelfcheckRow, read_mutants, read_selfcheck
from ..render import Section


def _interval(r: SelfcheckRow) -> str:
    lo, hi = r.noise_scale_interval
    return f"{r.noise_scale:.3f} [{lo:.3f}, {hi:.3f}]"


def _sensitivity(r: SelfcheckRow) -> str:
    t = r.tests["sensitivity"]
    return "n/a" if t.estimate is None else f"{t.estimate:.3f} [{t.interval[0]:.3f}, {t.interval[1]:.3f}]"


def mutant_table(path: Path) -> Table | None:
    """benchmarks/selfcheck_mutants.py's flag rates over fresh seeds (reports/selfcheck_mutants.json)."""
    if not path.is_file():
        return None
    data = read_mutants(path)
    t = Table(["mutant (tests/testkit/mutants.py)", "configuration", "flagged", "what the flags named"])
    for r in data.rows:
        named = "; ".join(f"{k} ({v})" for k, v in r.named.items()) or "—"
        t.rows.append([r.mutant or "none (the correct engine)", r.config, f"{r.flagged} of {r.seeds}", named])
    return t


def selfcheck_section(path: Path | None, mutants_path: Path | None = None) -> Section | None:
    if not path or not path.is_file():
        return None
    data = read_selfcheck(path)
    d = data.design
    t = Table(["configuration", "probe", "q", "T", "optimizer", "accountant ε", "noise ÷ booked [CI]",
               "sensitivity ÷ C [CI]", "ε̂95 (Steinke)", "GDP ε̂95", "ideal GDP ε̂95 (SGD)", "verdict"])
    for r in data.rows:
        t.rows.append([r.config, r.probe, r.sample_rate, r.steps, r.optimizer, r.accountant_epsilon,
                       _interval(r), _sensitivity(r), r.eps_lb_95, r.gdp_eps_lb_95, r.ideal,
                       ("FLAGGED: " + "; ".join(r.broke)) if r.flagged else "pass"])
    verdict = ("Every configuration passes: no test rejects the specification." if data.all_pass else
               "At least one configuration is FLAGGED (the verdict names which part of the specification broke); no "
               "DP figure of this report from an engine in that configuration should be trusted.")
    p9, p95 = data.power.get("noise_x0.9"), data.power.get("noise_x0.95")
    tables = [t]
    mutants = mutant_table(mutants_path) if mutants_path else None
    paras = [
        f"Before trusting any ε in this report: the project's own DP training path, tested against the specification "
        f"of the mechanism its accountant accounted. {d.canaries} gradient canaries in a linear probe "
        f"({d.transformer_canaries} in a transformer probe, whose own rows sit behind a Llama decoder layer over "
        "6-token sequences), each a member by a fair seeded coin and each with a gradient in coordinates only it "
        f"touches, far above C = {d.max_grad_norm}, trained at a claimed ({d.epsilon}, {d.delta})-DP. "
        "At every step the privatized gradient the optimizer receives is read along each canary's own gradient "
        "direction; the specification says it is C/B × [drawn] + N(0, (σC/B)²) with σ and q those the accountant "
        "booked. Tests (fixed in params.yaml `selfcheck` before any run), each at "
        f"{d.alpha} / ({d.family} configurations × {len(d.tests)} tests) = {d.test_level:.2g}: the noise "
        "scale (an exact χ² test on the never-drawn canaries), the clipped sensitivity (the members' movement per "
        "recorded draw), the inclusion law (draws against Bin(T, q)), the noise's independence across steps, and "
        "the one-run f-DP test of the final model against the accountant's own trade-off curve (q = 1: μ-GDP, the "
        "claim itself; q < 1: the Poisson-subsampled Gaussian's, an assumption stated with "
        "stages/shared/bounds/curve.py); "
        "plus an exact check that the optimizer's update is its update on the privatized gradient (DP-Adam(W) as "
        "post-processing). ε̂ columns are the one-run bounds beside the tests; the ideal is DP-SGD's last iterate "
        "(Adam's differs). " + verdict,
    ]
    if p9 and p95:
        paras.append(
            f"Power (exact χ² law of the noise test alone; the other tests can only add): an engine whose noise is "
            f"0.9 × the booked σ is flagged by each configuration with probability ≥ "
            f"{p9.least_per_configuration:.4f}; at 0.95 × by the family with probability "
            f"{p95.family_flag_rate:.4f} (each configuration ≥ {p95.least_per_configuration:.3f}).")
    paras.append(f"Checked: {data.checked}. Not checked: {data.not_checked}.")
    if mutants is not None:
        tables.append(mutants)
        paras.append("Deliberately broken engines (tests/testkit/mutants.py, never the product) over fresh seeds "
                     "(benchmarks/selfcheck_mutants.py), each on a configuration of the default set and judged at "
                     "the default family's level; the last column counts which part of the specification the "
                     "verdicts named.")
    return Section("DP engine self-check", tables=tables, paragraphs=paras)
