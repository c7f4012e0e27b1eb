"""The report's account of the second pre-registered variance study (`variance.silent`, stages/variance/paired.py),
from the variance stage's analysis.json: at one q, T, σ, settings the accountant does not see."""
from __future__ import annotations

from ...shared.core.formatting import Table, fmt


def _setting_test(name: str, t: dict, measure: str) -> str:
    if "p" not in t:
        return f"{name}: not tested ({t.get('skipped')})"
    verdict = ("" if "rejected" not in t else
               f", Holm p = {fmt(t['p_holm'], 3)}: {'differs' if t['rejected'] else 'not shown to differ'}")
    return (f"{name} − base in {measure}: median {fmt(t['median_difference'])}, mean {fmt(t['mean_difference'])} "
            f"(higher at {t['higher']}, lower at {t['lower']} of {t['pairs']} seeds); Wilcoxon p = "
            f"{fmt(t['p'], 4)}{verdict}")


def second_study(res: dict | None) -> tuple[list[str], list[Table]]:
    """The second pre-registered study (``variance.silent``, stages/variance/paired.py): at one q, T, σ, settings
    the accountant does not see, each paired by seed with the base; its answer, tests, power and models. Nothing
    when it has no table."""
    if not res:
        return [], []
    cfg = res["configs"]
    what = "; ".join(f"{c}: {v['optimizer']} lr {fmt(v['lr'], 4)}" for c, v in cfg.items())
    b, steps = next(iter(cfg.values()))["batch_size"], next(iter(cfg.values()))["steps"]
    head = (f"Second pre-registered study (`variance.silent`, registered with its analysis and power before its first "
            f"model): `runs.{res['run']}` at (ε, δ) = ({res['epsilon']:g}, {res['delta']:g}), b = {b}, T = {steps}, "
            f"so one q, T, σ and one ideal audit for every setting ({what}); each seed trains one model of every "
            "setting (paired: the same canaries, coins, batches and noise seed).")
    plan = res.get("plan") or {}
    power = plan.get("power", {}).get(str(float(plan.get("effect", 0))))
    if power is not None:
        head += (f" Power stated before the models: a setting {fmt(plan['effect'], 3)} correct guesses off the "
                 f"base is rejected with probability {fmt(power)} (ideal per-model count "
                 f"{fmt(plan['ideal_v']['mean'])} ± {fmt(plan['ideal_v']['sd'])}; {plan['assumption']}).")
    an = res.get("analysis")
    models = Table(["model (DVC experiment)", "setting", "seed", "status", "correct of r", "ε̂95", "member shift",
                    "valid ppl", "accountant ε", "experiment commit"],
                   [[m["point"], m["config"], m["seed"], m["status"],
                     f"{int(m['v'])} of {m['r']}" if m["v"] is not None else "–", fmt(m["eps_lb_95"]),
                     fmt(m["member_shift"]), fmt(m["valid_perplexity"]), fmt(m["accountant_epsilon"]),
                     f"`{(m['rev'] or '')[:8]}`" if m["rev"] else "–"] for m in res["models"]])
    if an is None:
        failed = "; ".join(f"{f['point']}: {f['error']}" for f in res["failed"]) or "none"
        return [head + f" {res['completed']} of {res['registered']} models have completed (failed: {failed}); the "
                       "registered test is computed once every registered model has run."], [models]
    prim = an["primary"]
    tests = "; ".join(_setting_test(c, t, prim["measure"]) for c, t in prim["tests"].items())
    answer = ("the audit's count differs: " if prim["varies"] else "not shown: ") + (
        "at one (q, T, σ) — one accountant's ε and one ideal audit — the primary attack's correct guesses differ "
        "with settings the accountant does not see, each optimizer as configured here (its learning rate not "
        "tuned for it), so this compares those configurations, not the optimizers at their best; and a lower "
        "count under one attack is not less leakage (another attack may find more)" if prim["varies"] else
        "no setting's paired difference from the base is significant at the family-wise level")
    second = []
    for m, sec in an["secondary"].items():
        second.append(f"{m.replace('_', ' ')}: " + "; ".join(_setting_test(c, t, m) for c, t in sec["tests"].items()))
    return [head,
            f"Answer to \"at equal (ε, δ), does what leaks vary beyond what (q, T, σ) predict?\": {answer} "
            f"({an['test']}, Holm over {len(an['settings'])} settings at {an['alpha']:g}): {tests}.",
            "Secondary (same paired test, no verdict): " + " — ".join(second) + "."], [models]
