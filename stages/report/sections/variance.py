"""The report's empirical-privacy-variance section, from the ``variance`` stage's analysis.json and plots."""
from __future__ import annotations

from pathlib import Path

from ...shared.core.formatting import Table, fmt
from ...shared.core.io import read_json
from ...variance.schema import SCORE_COLUMNS
from ..render import Section
from .silent import second_study

MODEL_TITLES = {"individual": "score ~ log b + log T + log η", "compute": "score ~ log C + log η (C = b·T)",
                "updates": "score ~ log U + log η (U = C·η)"}


def eps_label(eps: str, a: dict) -> str:
    """An epsilon with its delta: "8 at δ = 0.00866" (every delta of the points, where they differ)."""
    deltas = a.get("deltas")
    if not deltas:
        return f"{eps} (δ not recorded)"
    return f"{eps} at δ = {' / '.join(f'{d:.3g}' for d in deltas)}"


def control_passes(a: dict) -> bool:
    """The control's sign test says the trained secrets score above the never-trained ones, at the level the
    analysis tested it at (variance.control_alpha over the target epsilons)."""
    c = a.get("control") or {}
    return bool(c.get("n")) and c.get("p") is not None and c["p"] < c["level"]


def _explain(a: dict, measure: str, stat: str, eps: str, risks: dict, controlled: bool) -> str:
    """The sentences for a reader handed one epsilon (worded from this sweep's own numbers). ``controlled``: the
    control test passed; without it no conclusion is drawn from the spread and no configuration is named."""
    column = SCORE_COLUMNS[stat]
    means = [m[column] for m in a["config_means"] if m[column] is not None]
    lo, hi = (min(means), max(means)) if means else (None, None)
    v = a["variance"]
    eps = eps_label(eps, a)
    if means and lo != hi and not controlled:
        return (f"Every configuration here was calibrated by the accountant to the same ε = {eps}; their {measure} "
                f"(fine-tuned − base, {stat} over the trained secrets) ranges from {fmt(lo)} to {fmt(hi)} across "
                f"configurations, but the control test below does not show that these scores reflect training at this "
                "scale (trained secrets do not score distinguishably above secrets the same models never saw). So "
                "the spread is not evidence that models at one ε leak differently, and no configuration is "
                "recommended from it: run a larger budget (more steps, higher secret density, or the GPU preset).")
    if not means or lo == hi:
        return (f"Every configuration here was calibrated by the accountant to the same ε = {eps}, "
                "and every one scored "
                f"{measure} {fmt(lo)}: at this budget the measure cannot tell configurations apart (the seed's VMR ≈ 0 "
                "caveat), so this sweep says nothing about how much models at one ε differ. Do not read it as 'no "
                "variance': run a larger budget (more steps, higher secret density, or the GPU preset).")
    noise = (f"between seeds of one configuration the mean SD is {fmt(v['randomness_sd'])} (descriptive: no test "
             "separates the two)" if v["randomness_sd"] is not None else
             "with one seed per configuration this sweep cannot tell that spread from training randomness")
    best = min((r for r in risks.items() if r[1]["absolute_risk"] is not None), key=lambda r: r[1]["absolute_risk"],
               default=None)
    pick = (f"; in this sweep the lowest privacy risk over utility thresholds came from the {best[0]} pick (mean "
            f"absolute risk {fmt(best[1]['absolute_risk'])}), on {a['configurations']} configurations and "
            f"{a['points']} points" if best else "")
    return (f"Every configuration here was calibrated by the accountant to the same ε = {eps}, and their {measure} "
            f"(fine-tuned − base, {stat} over the trained secrets) ranges from {fmt(lo)} to {fmt(hi)} across "
            f"configurations (SD {fmt(v['hyperparameter_sd'])}); {noise}. If you were handed one ε, it is a worst-case "
            "bound that models trained with different batch sizes, steps and learning rates reach with different "
            f"empirical leakage, so ask for the configuration too{pick}.")


def _n(k: int) -> str:
    return f"{k} point" if k == 1 else f"{k} points"


def _control(a: dict, measure: str) -> str | None:
    """One sentence: do the trained secrets score above the randomised held-out ones (a training effect at all)?
    One sign test per target epsilon, at the level the analysis recorded (variance.control_alpha / target epsilons)."""
    c = a.get("control") or {}
    if not c.get("n"):
        return None
    test = (f"one-sided sign test p = {fmt(c['p'])}, level {fmt(c['level'])}" if c["p"] is not None
            else "no point where they differ")
    head = (f"Control: at the {c['n']} points the trained secrets' {measure} − base averaged {fmt(c['score'])} and the "
            f"randomised held-out secrets' (never trained on, same models) {fmt(c['control'])}; the trained arm was "
            f"higher at {_n(c['higher'])}, lower at {_n(c['lower'])}, tied at {_n(c['ties'])} ({test}).")
    if control_passes(a):
        return head + " The scores reflect training on the secrets."
    return (head + " At this budget the scores are not distinguishable from what fine-tuning does to secrets it "
            "never saw, so the spread and every comparison below are noise-level: they show the method, not a finding.")


def _table(stats: dict, headers: list[str], rows_of) -> Table:
    """One table over every statistic x epsilon: ``rows_of(analysis)`` gives the rows of one (statistic, epsilon)."""
    t = Table(["statistic", "ε (δ)", *headers])
    for stat, per_eps in stats.items():
        for eps, a in per_eps.items():
            t.rows += [[stat, eps_label(eps, a), *row] for row in rows_of(a)]
    return t


def _regression_rows(a: dict) -> list[list]:
    rows = []
    for model, fit in a["regressions"].items():
        if "skipped" in fit:
            rows.append([MODEL_TITLES[model], fit["n"], "–", f"not fitted: {fit['skipped']}", None, None, None])
            continue
        rows += [[MODEL_TITLES[model], fit["n"], fit["r2"], cov, c["coef"], c["se"], c["p"]]
                 for cov, c in fit["coefficients"].items() if cov != "const"]
    return rows


def _variance_rows(a: dict) -> list[list]:
    v, sel = a["variance"], a["selected"]
    return [[a["configurations"], a["points"], v["hyperparameter_sd"], v["randomness_sd"],
             "b={:g}, T={:g}, η={:g}".format(*sel) if sel else "–"]]


def _spearman_rows(measure: str):
    eps = "ε̂ (first of audit.primary.confidences)"  # the variance table's eps_hat (stages.variance.table)
    pairs = (("spearman_eps_hat_score", f"{eps} vs {measure}"), ("spearman_eps_hat_utility", f"{eps} vs utility"),
             ("spearman_score_utility", f"{measure} vs utility"))
    return lambda a: [[label, a[key]["n"], a[key]["rho"] if a[key]["rho"] is not None else
                       f"– ({a[key].get('skipped')})", a[key]["p"]] for key, label in pairs]


def _withheld_row(a: dict, width: int) -> list[list] | None:
    """The one row a table shows where the analysis withheld it (the control test failed), else None."""
    return [["–", f"not computed: {a['withheld']}", *[None] * (width - 2)]] if a.get("withheld") else None


def _tables(stats: dict, measure: str) -> list[Table]:
    return [
        _table(stats, ["configurations", "points", "SD over configurations (hyperparameters)",
                       "mean SD over seeds (randomness)", "selected by Alg. 1 (b, T, η)"], _variance_rows),
        _table(stats, ["model", "n", "R²", "covariate", "coef", "SE", "p"], _regression_rows),
        _table(stats, ["heuristic", "pairs", "accuracy", "random guessing"],
               lambda a: _withheld_row(a, 4) or [[h, r["pairs"], r["accuracy"], r["random_guess"]]
                                                 for h, r in a["heuristics"].items()]),
        _table(stats, ["method", "mean absolute risk", "mean relative risk", "thresholds (relative)"],
               lambda a: _withheld_row(a, 4) or [[m, r["absolute_risk"], r["relative_risk"],
                                                  f"{r['thresholds']} ({r['relative_thresholds']})"]
                                                 for m, r in a["selection"].items()]),
        _table(stats, ["pair", "n", "Spearman ρ", "p"], _spearman_rows(measure)),
    ]


SEED_Q = ("the seed (GPT-2 on Enron, 7 configurations × 4 seeds at ε = 8, App. E.1): Q1 yes, by inspection of "
          "Fig. 24, no test reported; Q2 Spearman ρ(ε̂, ACR) = −0.13 and ρ(ε̂, validation loss) = −0.71")


def _rho(res: dict | None) -> str:
    if not res or res.get("rho") is None:
        return "not computable" + (f" ({res['skipped']})" if res and res.get("skipped") else "")
    ci, over = res.get("ci95"), res.get("resampled")
    return f"ρ = {fmt(res['rho'])}" + (f" [95% bootstrap{f' over {over}' if over else ''} {fmt(ci[0])}, "
                                        f"{fmt(ci[1])}]" if ci else "") + f" over {res.get('n', '?')} models"


def _fr(t: dict) -> str:
    """Friedman's test in a few words (or why it was not computed)."""
    if "p" not in t:
        return f"Friedman's test not computed ({t.get('skipped')})"
    dropped = f", seeds {', '.join(map(str, t['dropped_blocks']))} dropped as incomplete" if t["dropped_blocks"] else ""
    return (f"Friedman χ² = {fmt(t['chi2'])}, df {t['df']}, p = {fmt(t['p'], 4)}, Kendall's W = "
            f"{fmt(t['kendall_w'])} over {t['blocks']} seed blocks{dropped}")


def _kw(t: dict) -> str:
    if "p" not in t:
        return f"Kruskal–Wallis not computed ({t.get('skipped')})"
    return f"Kruskal–Wallis H = {fmt(t['H'])}, df {t['df']}, p = {fmt(t['p'], 3)}, η²_H = {fmt(t['eta_squared_h'])}"


def _q1(st: dict, t: dict) -> str:
    """Q1's sentence: Friedman's verdict within seed blocks, the registered Kruskal-Wallis beside it."""
    q = f"(ε, δ) = ({st['epsilon']:g}, {st['delta']:g})"
    fr, kw, power = t["friedman"], t["kruskal_wallis"], t.get("power_under_ideal") or {}
    head = (f"Q1 — does ε̂ vary with the configuration at one {q}? The study is blocked by seed (each seed's "
            f"{fr['groups']} models share its canaries, coins, text sample and noise seed), so the test compares the "
            "configurations within seeds: ")
    if t["varies"] is None:
        head += _fr(fr) + "."
    else:
        head += (f"the one-run ε̂95 {'varies' if t['varies'] else 'is not shown to vary'} across the {fr['groups']} "
                 f"configurations ({_fr(fr)}, {fr['n']} models, at level {t['level']:g}"
                 + (f"; its power under the ideal was {fmt(power['friedman'])}" if power else "") + ").")
    if t["registered_varies"] is None or t["varies"] is None:
        return head + (" The registered test, Kruskal–Wallis, assumes independent groups, which these models are not: "
                       f"{_kw(kw)}.")
    agree = t["varies"] == t["registered_varies"]
    return head + (f" The registered test, Kruskal–Wallis, assumes independent groups, which these models are not: "
                   f"{_kw(kw)}" + (f" (power under the ideal {fmt(power['kruskal_wallis'])})" if power else "")
                   + ("; it agrees, so the verdict does not hang on Friedman's test replacing it after the models "
                      "ran." if agree else f"; it disagrees (registered verdict: "
                      f"{'varies' if t['registered_varies'] else 'not shown to vary'}), and Friedman's test "
                      "replaced it after the models ran, so weigh the verdict with that in mind."))


def _pair(p: dict) -> str:
    if "p" not in p:
        return f"{p['a']} vs {p['b']}: {p.get('skipped')}"
    floor = (f", the smallest p {p['nonzero']} non-zero pairs can give, so this comparison could not reject at "
             "0.05" if p["min_p"] >= 0.05 else "")
    return (f"{p['b']} − {p['a']} differs at {p['nonzero']} of {p['pairs']} seeds ({p['b']} higher at {p['higher']},"
            f" lower at {p['lower']}; median difference {fmt(p['median_difference'])}; Wilcoxon signed-rank "
            f"p = {fmt(p['p'], 3)}{floor})")


def _answer(st: dict, an: dict) -> str:
    """The first study's answer to "at equal (ε, δ), does what leaks vary beyond what (q, T, σ) predict?"."""
    res, t = an.get("residual"), an["q1"][st["measures"][0]]
    ideals = " / ".join(fmt(c["median_ideal_eps_lb_95_median"], 2) for c in st["configs"])
    raw = (f"the raw difference was not tested ({t['friedman'].get('skipped')})" if t["varies"] is None else
           f"the raw difference is {'significant' if t['varies'] else 'not significant'} "
           f"(Friedman p = {fmt(t['friedman']['p'], 4)})")
    head = ("At equal (ε, δ), does what leaks vary beyond what (q, T, σ) predict? In this first study the "
            "configurations differ in q and T, which moves the ideal audit itself (ideal medians "
            f"{ideals}), so a raw difference may be only what the accountant's parameters predict: {raw}")
    if not res:
        return head + "; the rows carry no ideal, so the residuals were not tested."
    across = [x for x in (res["friedman"], res["kruskal_wallis"]) if x.get("p", 1) < st["alpha"]]
    beyond = across + [p for p in res["same_q_t"] if p.get("p", 1) < st["alpha"]]
    pairs = "; ".join(_pair(p) for p in res["same_q_t"])
    text = ("; the residuals (each model's ε̂95 minus its configuration's ideal median; exploratory, tested after "
            f"the models ran) {'differ' if across else 'are not shown to differ'} across configurations ("
            + (f"Friedman χ² = {fmt(res['friedman']['chi2'])}, p = {fmt(res['friedman']['p'], 3)}"
               if "p" in res["friedman"] else "Friedman's test not computed")
            + f"; Kruskal–Wallis p = {fmt(res['kruskal_wallis'].get('p'), 3)})"
            + (f", and at the same q, T, σ (only η differs) {pairs}" if pairs else "") + ". ")
    if beyond:
        return head + text + ("So here leakage varies beyond what the ideal at each q, T, σ predicts (exploratory: "
                              "a test chosen after the models ran).")
    raw = ("So the raw difference is consistent with what the accountant's q and T predict through the ideal audit, "
           "and this" if t["varies"] else "So this")
    return head + text + (f"{raw} study shows no leakage difference beyond what (q, T, σ) predict; with "
                          f"{len(an['design']['blocks'])} seeds that is an absence of evidence, not evidence of "
                          "absence. Whether what the accountant does not see (learning rate, optimizer, clipping) "
                          "changes what leaks at one q, T, σ is the second study's question.")


def _streams(st: dict) -> str | None:
    """Next to the result: the models' random streams were coupled (the base commits the variance stage flags)."""
    commits = st.get("coupled_streams") or []
    if not commits:
        return None
    return ("These models were trained with coupled random streams (the seed + offset derivation, before the one "
            "SeedSequence derivation of stages/shared/core/seeds.py; commits "
            + ", ".join(f"`{c[:8]}`" for c in commits)
            + "): seed s's DP-noise generator was seeded like seed s + 1's initialisation, so the consecutive seed "
            "blocks are not strictly independent, as Friedman's test and the bootstrap over seeds assume. The "
            "models were not retrained.")


def _assumptions(st: dict) -> str:
    failed = "; ".join(f"{f['point']}: {f['error']}" for f in st["failed"]) or "none"
    rule = (f"{st['rule'][0]} 'in' and {st['rule'][1]} 'out' guesses among the new-token canaries" if st["rule"]
            else "the new-token canaries")
    return (f"Assumptions: one model (SmolLM2-135M, LoRA with the canaries' own rows) and one dataset "
            f"(PersonaChat; {rule}: the audit's primary rule the models were audited with); δ fixed at "
            f"{st['delta']:g}, never n^-1.1; blocked by seed: every configuration trains at each registered seed "
            "(its canary draw and membership coins, text sample, sampler and noise seed), so a seed's models share "
            "those draws and configurations with the same b and T draw the same batches and noise; every seed was "
            "registered before any model existed; Friedman's test compares configurations within seeds, and the "
            "bootstrap intervals resample whole seeds (each draw holds every configuration, so they are "
            "conditional on the configurations, and few seeds make them rough); the ideal is the linear "
            "last-iterate model at each configuration's q, T, σ (a heuristic, not these models' spread); the "
            "pooled bound adds the canaries of one configuration's models (parallel composition: each of them its "
            "own seed, so its own canaries and noise)"
            + ("; these models' random streams were coupled (above), so the runs a pooled bound adds are not "
               "strictly independent and the pooled column is descriptive, not a valid test"
               if st.get("coupled_streams") else "") + ". Failed models: " + failed + ".")


def _study(st: dict, plots: Path, plot_files: dict, second: dict | None = None
           ) -> tuple[list[str], list[Table], list]:
    """The pre-registered study's paragraphs (Q1, the answer beyond (q, T, σ), Q2, with the seed's numbers; the
    second study's where given), tables and plot; Q1 / Q2 only once every registered model has run."""
    an = st.get("analysis")
    paras = []
    if an is None:
        paras.append(f"Pre-registered study (seed section 5.1, `variance.study`): {st['completed']} of "
                     f"{st['registered']} models of `runs.{st['run']}` at (ε, δ) = ({st['epsilon']:g}, "
                     f"{st['delta']:g}) have run. {st['withheld']}. The rows below are descriptive; nothing is "
                     "concluded from them yet. For comparison, " + SEED_Q + ".")
    else:
        q2 = "; ".join(f"with {y.replace('_', ' ')} {_rho(res)}" for y, res in an["q2"].items())
        paras += [_q1(st, an["q1"][st["measures"][0]]), _answer(st, an), *filter(None, [_streams(st)]),
                  f"Q2 — is ε̂ aligned with utility and memorization? Spearman of ε̂95 {q2} (descriptive, no test; "
                  "an interval from few seeds is rough). "
                  "For comparison, " + SEED_Q + ".",
                  f"How much the ideal predicts: Spearman of each model's ε̂95 with its configuration's ideal median, "
                  f"{_rho(an['ideal_prediction'])}."]
        for m in st["measures"][1:]:  # the first measure is the confirmatory one; the others are secondary
            res = an["q1"][m]
            paras.append(f"Secondary ({m.replace('_', ' ')}, exploratory, no verdict): "
                         f"{_fr(res['friedman'])}; {_kw(res['kruskal_wallis'])}.")
    s_paras, s_tables = second_study(second)
    paras += [_assumptions(st), *s_paras]
    images = [("Pre-registered study: each model's one-run ε̂95 by configuration (dots), the ideal median "
               "(heuristic, bar), the pooled bound over the configuration's models (diamond) and the accountant's ε",
               plots / plot_files["study"])] if "study" in plot_files else []
    return paras, [*study_tables(st), *s_tables], images


def study_tables(st: dict) -> list[Table]:
    """The study's configurations (medians, pooled bound, ideal) and its models, one row each."""
    cfg = Table(["config", "b", "T", "η", "q", "σ", "models", "median ε̂95", "median GDP ε̂95",
                 "pooled ε̂95 (m, r, v)" + (" — coupled streams: descriptive" if st.get("coupled_streams") else ""),
                 "ideal median", "median member shift", "median valid ppl",
                 "median exposure (control)"])
    for c in st["configs"]:
        pooled = c["pooled"]
        cfg.rows.append([c["config"], c["batch_size"], c["steps"], fmt(c["lr"], 4), fmt(c["sample_rate"], 3),
                         fmt(c["noise_multiplier"], 3), c["models"], fmt(c["median_eps_lb_95"]),
                         fmt(c["median_gdp_eps_lb_95"]),
                         f"{fmt(pooled['eps_lb_95'])} ({pooled['m']}, {pooled['r']}, {pooled['v']})"
                         if pooled["r"] else "–", fmt(c["median_ideal_eps_lb_95_median"]),
                         fmt(c["median_member_shift"]), fmt(c["median_valid_perplexity"]),
                         f"{fmt(c['median_exposure'])} ({fmt(c['median_exposure_control'])})"
                         if c["median_exposure"] is not None else "–"])
    models = Table(["model (DVC experiment)", "config", "seed", "status", "ε̂95", "GDP ε̂95", "member shift",
                    "valid ppl", "exposure", "accountant ε", "experiment commit"],
                   [[m["point"], m["config"], m["seed"], m["status"], fmt(m["eps_lb_95"]), fmt(m["gdp_eps_lb_95"]),
                     fmt(m["member_shift"]), fmt(m["valid_perplexity"]), fmt(m["exposure"]),
                     fmt(m["accountant_epsilon"]), f"`{(m['rev'] or '')[:8]}`" if m["rev"] else "–"]
                    for m in st["models"]])
    return [cfg, models]


def variance_section(variance_dir: Path | None) -> Section | None:
    path = variance_dir / "analysis.json" if variance_dir else None
    if path is None or not path.is_file():
        return None
    r = read_json(path)
    stats, measure = r["statistics"], r["measure"].upper()
    primary = stats.get(r["primary"]) or {}
    s_paras, s_tables, s_images = (_study(r["study"], variance_dir / "plots", r.get("plots", {}),
                                          r.get("second_study")) if r.get("study") else ([], [], []))
    if not primary:
        return Section("Empirical privacy variance", paragraphs=[
            *s_paras, f"Sweep {r['sweep']}: none of its {r['points']} points completed."], tables=s_tables,
            images=s_images)
    eps0 = next(iter(primary))
    plots = variance_dir / "plots"
    images = [(cap, plots / r["plots"][key]) for key, cap in (
        ("jitter", f"{measure} per configuration at each target ε (seed Fig. 2): dots are configurations (mean over "
                   "seeds), crosses single seeds; the SD over configurations is printed above each group"),
        *[(f"selection_eps{e}", f"ε = {eps_label(e, primary[e])}: validation loss vs {measure} per configuration, "
                                "with the pick of Alg. 1, "
                                "of the best-utility practice and of the worst-utility heuristic (seed Fig. 9)")
          for e in primary],
        *[(f"profiles_eps{e}", f"ε = {eps_label(e, primary[e])}: the accountant's privacy profile ε(δ) "
                               "of each (b, T) (seed Fig. 11)")
          for e in primary]) if key in r.get("plots", {})]
    pts = Table(["point (DVC experiment)", "experiment commit", "status"],
                [[p["point"], f"`{(p['rev'] or '')[:8]}`" if p["rev"] else "–", p["status"]] for p in r["table"]])
    failed = "; ".join(f"{f['point']}: {f['error']}" for f in r["failed"]) or "none"
    control = [c for c in (_control(primary[e], measure) for e in primary) if c]
    held = [f"{stat} at ε = {eps_label(e, a)}" for stat, per in stats.items() for e, a in per.items()
            if a.get("withheld")]
    withheld = ([f"Not computed, for {'; '.join(held)}: the regressions, heuristic accuracies and the Algorithm-1 "
                 "selection, because the control test (fixed before the points: variance.control_alpha) does not "
                 "show that the statistic measures training there; fitting or ranking its spread would print "
                 "findings that are not there."] if held else [])
    return Section("Empirical privacy variance", paragraphs=[
        *s_paras, "The hyperparameter sweep (`variance.sweep`, seed sections 3-4):",
        _explain(primary[eps0], measure, r["primary"], eps0, primary[eps0]["selection"],
                 control_passes(primary[eps0])), *control, *withheld,
        f"Sweep `{r['sweep']}` from commit `{(r['base_commit'] or '')[:8]}`: {r['completed']} of {r['points']} points "
        f"completed (failed: {failed}). Each point is one DVC experiment (its name in the table below; `dvc exp show`, "
        "`dvc exp apply <name>`) that fine-tuned one configuration (b, T, η, seed) with σ calibrated to the target ε. "
        f"Scores are {measure} of the fine-tuned model minus the base model's, over the secrets the run's randomised "
        "control trained on; mean (section 3) and max (the worst case, App. F). Utility = −validation loss.",
        "Regressions are OLS (statsmodels) of the score on log hyperparameters, pooled over seeds (section 4.1); "
        "p-values are nominal and exploratory (3 models × 2 statistics, no pre-registered test). Heuristic accuracy "
        "counts a tie as wrong (App. D.1); random guessing is right on half the pairs whose scores differ. Selection "
        "risk slides a utility threshold over every configuration and compares each method's pick with the oracle "
        "(the lowest score) on the configurations at least that useful (section 4.3); relative risk skips thresholds "
        "whose oracle scores 0. Spearman ρ relates the audited ε̂ (where the points inserted canaries) to the score "
        "(section 5.1)."],
        tables=[*s_tables, *_tables(stats, measure), pts], images=[*s_images, *images])
