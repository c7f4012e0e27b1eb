"""Assemble the report from the audit's metrics and ROC curves, data stats, secrets and dvc.lock: one
function per section, each reading only what it shows."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..attack.schema import read_record
from ..audit.schema import NON_CANARY_GROUPS, THREAT, VERDICTS, Metrics, bound_keys, fpr_keys, read_metrics, read_roc
from ..core import lineage as lin
from ..core.artifacts import Locations
from ..core.io import atomic_file, read_json, read_table, write_json
from ..datasets import STATS
from ..secrets.schema import SECRETS
from .data_docs import build_data_docs
from .headline import headline_html, headline_markdown, headline_metrics, headlines, lineage_html, lineage_markdown, lineage_rows
from .plots import ceiling_plot, exposure_plot, exposure_points, privacy_plot, region_points, roc_plot, roc_points
from .audit_why import response_section, study_section
from .render import Section, Table, ci, flatten, fmt, to_html, to_markdown
from .selfcheck import selfcheck_section
from .variance import variance_section

@dataclass
class Inputs:
    metrics: Metrics
    roc: dict  # (run, attack, group) -> (fpr, tpr)
    where: Locations
    lock: dict
    git: dict
    verified: bool  # dvc.lock's md5 of the audit's outputs matches the files
    plots_dir: Path
    out_dir: Path
    lineage: dict = field(default_factory=dict)  # metrics.json path -> lineage entry (number_lineage)
    bases: dict = field(default_factory=dict)  # run -> its run record's base_model (source.json)
    variance_dir: Path | None = None  # the variance stage's analysis (analysis.json, plots/)
    study_dir: Path | None = None  # the audit design study (reports/audit_study/, flows/audit_study.py)
    selfcheck: Path | None = None  # the DP engine self-check (reports/selfcheck.json, leakaudit selfcheck)

    @property
    def runs(self) -> dict:
        return self.metrics["runs"]

    @property
    def bounds(self) -> list[str]:
        """eps_lb_<c> keys, one per audit.primary.confidences; the first is the one compared and plotted."""
        return bound_keys(self.metrics)

    @property
    def fprs(self) -> list[str]:
        return fpr_keys(self.metrics)

    @cached_property
    def heads(self) -> list:
        """The headline block's content, per run (shown at the top, in its lineage table and in headline.md/json)."""
        return headlines(self.runs, self.bases, self.bounds, self.headline_fpr)

    def plot_data(self, kind: str, name: str, points: list[dict]) -> None:
        """Write one `dvc plots` data file: reports/plots_data/<kind>/<name>.json (dvc.yaml `plots:`)."""
        write_json(self.out_dir / "plots_data" / kind / f"{name}.json", points)

    @property
    def headline_fpr(self) -> str | None:
        """The FPR shown with its interval: 1% when audit.fprs has it, else the configured one closest to it."""
        return min(self.fprs, key=lambda f: (abs(float(f) - 0.01), float(f)), default=None)


def _short(md5: str | None) -> str:
    return (md5 or "?")[:8]


def _bound_label(key: str) -> str:
    return "ε̂" + key.rsplit("_", 1)[-1]


def _pct(fpr: str) -> str:
    return f"{float(fpr) * 100:g}%"


def number_lineage(metrics: Metrics, lock: dict, git: dict, verified: bool) -> dict:
    """metrics.json path -> where it came from (producing stage, its inputs' md5, params, chain)."""
    audit = lin.stage_record(lock, "audit") or {}
    inputs = {d["path"]: d["md5"] for d in audit.get("deps", [])}
    chains: dict[str, list[str]] = {}
    out = {}
    for path, value in flatten(metrics.get("runs", {}), numbers_only=True).items():
        run = path.split(".")[0]
        if run not in chains:  # audit reads this run's scores only
            chains[run] = [f"attack@{run}"] + lin.upstream(lock, f"attack@{run}")
        out[f"runs.{path}"] = {"value": value, "stage": "audit", "inputs": inputs, "params": audit.get("params", {}),
                               "upstream": chains[run], "git_commit": git.get("commit"),
                               "git_dirty": git.get("dirty"), "lock_verified": verified}
    for path, value in flatten(metrics.get("planned", {}), numbers_only=True).items():  # params only, no data
        out[f"planned.{path}"] = {"value": value, "stage": "audit", "inputs": {}, "params": audit.get("params", {}),
                                  "upstream": [], "git_commit": git.get("commit"), "git_dirty": git.get("dirty"),
                                  "lock_verified": verified}
    return out


# ----------------------------------------------------------------------------- sections
def headline_section(inp: Inputs) -> Section:
    heads = inp.heads
    return Section("Headline: what each run leaked, and how sure we are", in_toc=False,
                   raw_html=headline_html(heads), raw_md=headline_markdown(heads))


def headline_lineage_section(inp: Inputs) -> Section:
    rows = lineage_rows(inp.heads, inp.lineage)
    return Section("Lineage of the headline numbers", raw_html=lineage_html(rows), raw_md=lineage_markdown(rows),
                   paragraphs=[
                       "Each headline number's path in reports/metrics.json, the stage that wrote it and its upstream "
                       "chain as dvc.lock records them, the params it read and the md5 of its inputs. "
                       "`leakaudit lineage reports/metrics.json:<path>` prints the whole chain back to the raw files "
                       "(and refuses when the workspace no longer matches dvc.lock)."])


def summary_section(inp: Inputs) -> Section:
    git, ap = inp.git, inp.metrics.get("audit_params", {})
    base = next(iter(inp.bases.values()), {})
    return Section("Summary", paragraphs=[
        f"Git commit `{git.get('commit') or 'unknown'}`" + (" (working tree dirty)" if git.get("dirty") else "")
        + f"; dvc.lock {'matches' if inp.verified else 'does NOT match'} reports/metrics.json"
        + ("" if inp.verified else " — these numbers are not traceable to a recorded DVC run") + ".",
        f"Base model: `{base.get('name_or_path', '?')}` ({base.get('architecture', '?')}, "
        f"{fmt(base.get('num_parameters'))} parameters"
        + (f", GGUF sha256 `{base['sha256'][:16]}…`" if base.get("sha256") else "") + ").",
        "Canaries are **synthetic**: random-token prefixes with a secret of the stated kind, each a member "
        "with probability 1/2 (seeded), inserted into **real** text (PersonaChat: ConvAI2 validation dialogues "
        "split by dialogue into train/valid/test, since the train split is not available offline). Enron and "
        "TOFU are real samples (see Data); secrets extracted from them are real strings, never shown here.",
        _primary_sentence(ap) + " δ = "
        + (f"{ap['delta']:g} for every run" if ap.get("delta") is not None else
           f"the run's own δ for DP runs (so ε̂ and the accountant's ε are at the same δ) and "
           f"{ap.get('fallback_delta', 0):g} for runs without DP") + "."
        + " AUROC and TPR intervals: 95% stratified "
        f"bootstrap over members and non-members ({ap.get('bootstrap')} resamples). TPR at FPR x is the best "
        "TPR at an empirical FPR ≤ x (no interpolation).",
    ])


def _primary_sentence(ap: dict) -> str:
    p = ap["primary"]
    return (f"Headline ε̂ of every run with canaries: one pre-registered one-run test (Steinke et al. 2023), read from "
            f"params.yaml `audit.primary` — the `{p['attack']}` score on `{p['kind']}` "
            f"canaries, the {p['k_pos']} highest guessed \"in\" and the {p['k_neg']} lowest \"out\"; ε̂ is the "
            "largest ε whose (ε, δ)-DP null hypothesis that test rejects at the stated confidence. The bound holds "
            "only if this choice was made before the scores were seen: `git log -p params.yaml` shows when "
            "`audit.primary` "
            "last changed, and dvc.lock records the value this audit used (params sha256 "
            f"`{(ap.get('primary_sha256') or '?')[:16]}…`; reports/lineage.json gives every number's params, inputs "
            "and commit). Every other attack × kind × "
            "guess-count bound is exploratory and Bonferroni-corrected over its family; no uncorrected maximum is "
            "reported as a bound.")


def _pair(p: dict, prefix: str, bounds: list[str]) -> str:
    return " / ".join(fmt(p.get(prefix + b)) for b in bounds)


def audit_section(inp: Inputs) -> Section:
    bounds = inp.bounds
    label = " / ".join(_bound_label(b) for b in bounds)
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


def ceiling_section(inp: Inputs) -> Section | None:
    """Per DP run (and planned regime): accountant ε, last-iterate ε, the ideal audit and the measured one."""
    bounds = inp.bounds
    if not bounds:
        return None
    first, label = bounds[0], _bound_label(bounds[0])
    tag = first.rsplit("_", 1)[-1]
    t = Table(["run", "q", "T", "σ", "δ", "accountant ε", "last-iterate ε (heuristic)",
               f"ideal {label} median [p10, p90]", f"measured {label}", "efficiency (measured ÷ ideal median)",
               f"ideal GDP {label} median [p10, p90]", f"measured GDP {label}", "GDP efficiency"])
    rows = []
    regimes = [(run, r["audit_primary"], r["privacy"]) for run, r in inp.runs.items()
               if (r.get("audit_primary") or {}).get("last_iterate_epsilon") is not None]
    regimes += [(f"{name} (planned, not run)", p, p) for name, p in (inp.metrics.get("planned") or {}).items()]
    for name, p, pv in regimes:
        ideal = [p[f"ideal_{first}_{q}"] for q in ("p10", "median", "p90")]
        ideal_gdp = [p[f"ideal_gdp_{first}_{q}"] for q in ("p10", "median", "p90")]
        t.rows.append([name, pv["sample_rate"], pv["steps"], pv["noise_multiplier"], f"{p['delta']:.2g}",
                       p["accountant_epsilon"], p["last_iterate_epsilon"],
                       f"{fmt(ideal[1])} [{fmt(ideal[0])}, {fmt(ideal[2])}]", p.get(first), p.get(f"efficiency_{tag}"),
                       f"{fmt(ideal_gdp[1])} [{fmt(ideal_gdp[0])}, {fmt(ideal_gdp[2])}]", p.get(f"gdp_{first}"),
                       p.get(f"gdp_efficiency_{tag}")])
        rows.append({"name": name, "accountant": p["accountant_epsilon"], "last_iterate": p["last_iterate_epsilon"],
                     "ideal": ideal, "ideal_gdp": ideal_gdp, "measured": p.get(first),
                     "measured_gdp": p.get(f"gdp_{first}")})
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
        "never smaller). Simulating the pre-registered test (same m, k₊, k₋, δ, confidence) on canaries that follow "
        "that model gives the ideal ε̂: the median of a heuristic simulation for an ideal white-box statistic, a "
        "reference point, not a limit (a valid audit can exceed it). Efficiency = measured ÷ ideal median says how "
        "much of that evidence the real canaries produced. More exposures per canary (q·T) raise the ceiling; the planned rows "
        "are regimes not run here (σ from the accountant) — see README, GPU preset."])


def exploratory_section(inp: Inputs) -> Section | None:
    bounds = inp.bounds
    tables, paras = [], []
    for run, r in inp.runs.items():
        e = r.get("audit_exploratory")
        if not e:
            continue
        t = Table([f"{run}: attack (same ranking)", "kind", "k₊", "k₋", "right of guesses"]
                  + [f"{_bound_label(b)} corrected" for b in bounds])
        for x in e["tests"]:
            t.rows.append([x["attack"] + (f" (= {', '.join(x['same_ranking'])})" if x["same_ranking"] else ""),
                           x["kind"], x["k_pos"], x["k_neg"], f"{x['v']} of {x['r']}"] + [x.get(b) for b in bounds])
        tables.append(t)
        same = "; ".join(f"{', '.join(i['attacks'])} on {i['kind']}" for i in e["identical_rankings"])
        best = e["best"].get(bounds[0], {}) if bounds else {}
        paras.append(
            f"{run}: family of N = {e['family_size']} distinct tests, each at confidence "
            + ", ".join(f"{v:.5f}" for v in e["per_test_confidence"].values())
            + f" (Bonferroni), so the largest corrected {_bound_label(bounds[0])} — {fmt(best.get('value'))} "
            f"({best.get('attack')} on {best.get('kind')}, k₊={best.get('k_pos')}, k₋={best.get('k_neg')}) — holds "
            "at the stated family-wise confidence."
            + (f" Identical rankings, counted once: {same}." if same else ""))
    if not tables:
        return None
    return Section("Exploratory audit family (Bonferroni-corrected, never a headline)", tables=tables, paragraphs=[
        "Every membership attack × canary kind × (k₊, k₋) of `audit.exploratory`. Attacks that rank a kind's "
        "canaries identically make the same guesses for every k and are one test (zlib and min-k on one-token "
        "secrets rank exactly like loss). The correction is the price of looking at many tests: the bound's δ term "
        "(up to 2mδ) puts a floor under its p-value, so at a per-test level 1 − (1 − c)/N close to 1 even "
        "all-correct guesses support only a small ε, or none."] + paras)


def _curves(inp: Inputs, run: str, atk: str, groups: dict) -> dict:
    """group -> (fpr, tpr, auroc) from the audit's ROC artifact."""
    import numpy as np

    out = {}
    for group, m in groups.items():
        fpr, tpr = inp.roc.get((run, atk, group), ([], []))
        out[group] = (np.asarray(fpr), np.asarray(tpr), m["auroc"])
    return out


def _privacy_image(inp: Inputs, run: str, r: dict, panels: dict) -> tuple[str, Path] | None:
    """The accountant's profile and the loss attack's canary ROCs in the privacy region (DP runs)."""
    pv = r["privacy"]
    canary = {g: c for g, c in panels.get("loss", {}).items() if g not in NON_CANARY_GROUPS}
    if not (pv.get("dp") and pv.get("profile") and canary and inp.bounds):
        return None
    first = inp.bounds[0]
    got = (r.get("audit_primary") or {}).get(first) or 0.0
    png = inp.plots_dir / f"privacy_{run}.png"
    label = _bound_label(first)
    said = "the trainer's claimed" if pv.get("claimed") else "accountant"  # an external run's claim is not ours
    privacy_plot(pv["profile"], canary, pv["epsilon_spent"], pv["delta"], got or None,
                 f"run {run}: {said} ε = {pv['epsilon_spent']:.2f} vs audited {label} = {got:.2f}", png)
    inp.plot_data("privacy", run, region_points(pv["epsilon_spent"], pv["delta"], canary))
    profile = ("our accountant's profile of the trainer's claimed σ, q, T" if pv.get("claimed")
               else "the accountant's privacy profile")
    return (f"Run {run}: {profile}, and the loss attack's ROC on canaries "
            "inside the (ε, δ) privacy region (dashed: the region at the pre-registered test's ε̂)", png)


def roc_images(inp: Inputs, run: str, r: dict) -> tuple[list, dict]:
    """The run's ROC panels (one per membership attack) and privacy-region plot, and their dvc-plots points."""
    panels = {atk: _curves(inp, run, atk, groups) for atk, groups in r["attacks"].items()}
    png = inp.plots_dir / f"roc_{run}.png"
    roc_plot(panels, f"run {run} ({r['dataset']})", png)
    images = [(f"Run {run}: ROC of each membership attack (log-log), one curve per item group", png)]
    privacy = _privacy_image(inp, run, r, panels)
    return images + ([privacy] if privacy else []), {f"{run}_{atk}": roc_points(c) for atk, c in panels.items()}


def mia_section(inp: Inputs) -> Section:
    fprs, head = inp.fprs, inp.headline_fpr
    mt = Table(["run", "attack", "items", "members / non-members", "AUROC [95% CI]",
                "AUROC − blind AUROC [95% paired CI] (non-randomised pools)"]
               + [f"TPR@{_pct(f)}FPR" + (" [95% CI]" if f == head else "") for f in fprs])
    images, plot_json = [], {}
    for run, r in inp.runs.items():
        same = {(i["kind"], a): i["attacks"] for i in (r.get("audit_exploratory") or {}).get("identical_rankings", [])
                for a in i["attacks"]}
        for atk, groups in r["attacks"].items():
            for group, m in groups.items():
                names = same.get((group, atk), [atk])
                if names[0] != atk:  # ranks this group exactly like an attack already listed: reported once
                    continue
                t = m["tpr_at_fpr"]
                label = atk + (f" (= {', '.join(names[1:])}: identical ranking)" if len(names) > 1 else "")
                row = [run, label, group, f"{m['members']} / {m['non_members']}"]
                if (r.get("blind") or {}).get(group, {}).get("flagged"):  # the numbers measure the shift, not leakage
                    mt.rows.append(row + ["INVALID: distribution shift (see Blind baselines)", "–"]
                                   + ["–"] * len(fprs))
                    continue
                mb = m.get("minus_blind")
                mt.rows.append(row + [ci(m["auroc"], m["auroc_ci95"], m.get("auroc_p_exact")),
                                      ci(mb["value"], mb["ci95"]) if mb else "–"]
                               + [ci(t[f]["value"], t[f]["ci95"]) if f == head else t.get(f, {}).get("value")
                                  for f in fprs])
        run_images, run_points = roc_images(inp, run, r)
        images += run_images
        plot_json.update(run_points)
    for name, pts in plot_json.items():
        inp.plot_data("roc", name, pts)
    tables = [mt] + ([lt] if (lt := canary_users_table(inp)).rows else [])
    return Section("Membership and user inference", tables=tables, images=images, paragraphs=[
        "Items: canary kinds (synthetic, randomized membership), `text` (the run's own training rows against "
        "as many held-out rows of the same dataset), `users` (held-in vs held-out users, scored on the "
        "attacker's samples that were never trained on), `canary_users` (real users with a shared substring "
        "inserted into every document, held in or out by a seeded coin; user-inference-attacks Algorithm 1). "
        "`text` and `users` are not randomised: their rows are INVALID where the blind baseline below finds a "
        "distribution shift, and their AUROC minus the blind baseline's on the same items (a paired bootstrap) is "
        "what the model adds over a model-free classifier. Intervals: 95% bootstrap over members and non-members "
        "(over users for users); a side with fewer than "
        f"{inp.metrics['audit_params'].get('min_per_side', '?')} items gets no interval, and its AUROC the exact "
        "one-sided permutation p-value of AUROC > 0.5 instead."])


def canary_users_table(inp: Inputs) -> Table:
    """User inference on canary users per shared-substring length (the seed's Fig. 6, left)."""
    lt = Table(["run", "attack", "substring length (tokens)", "held-in / held-out canary users", "AUROC [95% CI]"])
    for run, r in inp.runs.items():
        for atk, per in (r.get("canary_users_by_length") or {}).items():
            for length, m in sorted(per.items(), key=lambda kv: int(kv[0])):
                lt.rows.append([run, atk, length, f"{m['members']} / {m['non_members']}",
                                ci(m["auroc"], m["auroc_ci95"], m.get("auroc_p_exact")) if m["auroc"] is not None
                                else "– (one side only)"])
    return lt


def _what_differs(pool: dict) -> str:
    """The length/format features that differ most (|Cohen's d| >= 0.5), or that none does."""
    big = [d for d in pool["differences"] if abs(d["d"]) >= 0.5][:3]
    if not big:
        return ("no length/format feature (|d| < 0.5): the classifier separates them on character n-grams "
                "(content)" if pool["flagged"] else "no length/format feature differs (|d| < 0.5)")
    return "; ".join(f"{d['feature']}: members {d['members']:.3g} vs non-members {d['non_members']:.3g} "
                     f"(d = {d['d']:+.2f})" for d in big)


def _differences_text(inp: Inputs, row: dict) -> str:
    """Per run sharing the pool: its largest model-based AUROC (the audit's pick) minus the blind AUROC, with the
    paired interval."""
    out = []
    for run, top in row["largest_model_auroc"].items():
        mb = inp.runs[run]["attacks"][top["attack"]][row["group"]].get("minus_blind") if top else None
        if mb:
            out.append(f"{run} ({top['attack']}): {ci(mb['value'], mb['ci95'])}")
    return "; ".join(out) or "–"


def _verdicts_text(row: dict) -> str:
    """The pool's verdict, per run where the runs sharing it differ (their attacks differ in strength)."""
    words = {run: VERDICTS[v] for run, v in row["verdicts"].items()}
    if len(set(words.values())) == 1:
        return next(iter(words.values()))
    return "; ".join(f"{run}: {w}" for run, w in words.items())


def blind_section(inp: Inputs) -> Section | None:
    check = inp.metrics.get("shift_check") or {}
    rows = check.get("pools") or []
    if not rows:
        return None
    power = rows[0]["power"]["power"]
    bt = Table(["pool", "runs sharing it", "members / non-members", "blind AUROC [95% CI]", "p (AUROC ≤ 0.5)",
                f"detectable blind AUROC ({power:.0%} power)",
                "largest model-based AUROC − blind [95% paired CI] (per run; attack picked after scoring)",
                "verdict", "what differs"])
    for row in rows:
        pool = inp.runs[row["runs"][0]]["blind"][row["group"]]
        det = row["power"]["auroc"]
        bt.rows.append([f"{row['group']} {row['pool'][:8]}", ", ".join(row["runs"]),
                        f"{row['members']} / {row['non_members']}",
                        ci(row["auroc"], row["auroc_ci95"]), f"{fmt(row['p_value'])} ({row['test']})",
                        fmt(det) if det is not None else "none ≤ 1 (too few items for the level)",
                        _differences_text(inp, row), _verdicts_text(row), _what_differs(pool)])
    folds = sorted({p["folds"] for r in inp.runs.values() for p in (r.get("blind") or {}).values()})
    return Section("Blind baselines: is a pool's membership signal a distribution shift?", tables=[bt], paragraphs=[
        "Pools whose membership is not randomised by construction — a run's trained vs held-out text rows, held-in "
        "vs held-out users — can differ in distribution, and then a membership attack measures the difference, not "
        "leakage (Das, Zhang & Tramèr 2024; Duan et al. 2024). The blind baseline never sees the model: a "
        "logistic regression on the text alone (character 1–3-gram TF-IDF, length and format features) scored out "
        f"of fold by {'/'.join(str(k) for k in folds)}-fold stratified cross-validation. Runs that score the same "
        "rows with the same labels share one pool (one row, one test). A pool is marked INVALID when its blind AUROC "
        "is above 0.5 by a one-sided Mann-Whitney test (exact permutation distribution below "
        f"{inp.metrics['audit_params'].get('min_per_side', '?')} items on a side) at α/N = "
        f"{check.get('alpha', float('nan')):g}/{check.get('family_size', 0)} (Bonferroni over the distinct pools); "
        "its membership numbers are then not shown as leakage.",
        f"The guard's power: 'detectable blind AUROC' is the smallest blind AUROC the same test flags in {power:.0%} "
        f"of {rows[0]['power']['trials']} simulated pools of that size at that level (binormal scores, seeded; "
        "a rank test, so only the AUROC and the sizes matter). Where the largest model-based AUROC on the pool is "
        "below it, a shift as large as that attack's signal would usually go unflagged, so the verdict is 'guard too "
        "weak at this size', not 'no shift'; this compares the blind classifier's reading of a shift with the "
        "model's, an assumption rather than a guarantee. 'Largest model-based AUROC − blind' is the attack's AUROC "
        "minus the blind baseline's on the same items, from one paired stratified bootstrap: above 0, the model "
        "tells members apart better than the text alone does. 'What differs' lists length/format features only "
        "(never text). Canaries, formatted canaries, canary users and the VMR/AIR control are randomised by a "
        "seeded coin and need no baseline."])


def _family_bound(r: dict, attack: str, kind: str, primary: dict, key: str | None) -> float | None:
    """The Bonferroni-corrected bound of (attack, kind) at the primary's guess counts, from the exploratory family
    (None when that (k_pos, k_neg) is not in its grid)."""
    for t in (r.get("audit_exploratory") or {}).get("tests", []):
        k_pos = min(primary["k_pos"], t["m"])
        if (kind == t["kind"] and attack in [t["attack"], *t["same_ranking"]] and key
                and (t["k_pos"], t["k_neg"]) == (k_pos, min(primary["k_neg"], t["m"] - k_pos))):
            return t.get(key)
    return None


def _trainable_text(t: dict) -> str:
    if t["paradigm"] == "external":
        return "trained elsewhere: which parameters were trained is the trainer's, not known here"
    what = {"lora": f"LoRA r={t['lora_r']} on {', '.join(t['lora_targets'])}",
            "full": "every decoder weight (the tied embedding matrix frozen)",
            "prompt": f"a {t['virtual_tokens']}-token soft prompt",
            "prefix": f"a {t['virtual_tokens']}-token key/value prefix"}[t["paradigm"]]
    return (f"{what}, plus own input and output rows for {t['new_token_rows']} new tokens and for "
            f"{t['secret_token_rows']} vocabulary tokens ({t['parameters']:,} trainable parameters)")


def _kinds_sentence(runs: dict[str, dict]) -> str:
    """What the kind comparison rests on: the same parameters for every kind's secret tokens, or not."""
    external = [run for run, t in runs.items() if t["paradigm"] == "external"]
    runs = {run: t for run, t in runs.items() if run not in external}
    fair = all(t["secret_rows"] for t in runs.values())
    trained = "; ".join(f"{run}: {_trainable_text(t)}" for run, t in runs.items())
    if external:
        elsewhere = (f"Run {', '.join(external)} was trained elsewhere: whether its kinds trained the same parameters "
                     "is not known here, so its kind comparison is descriptive.")
        if not runs:
            return elsewhere
        return f"{_kinds_sentence(runs)} {elsewhere}"
    if fair:
        return ("Every canary kind of a run is inserted under the same model, steps and sampling rate q (the same "
                "expected number of exposures per canary), and every secret token, of every kind, member or not, "
                "has its own trainable input and output row (a new token's rows, or a vocabulary token's own copy "
                "of its base rows): the kinds differ only in how the secret is chosen (privacy-auditing-of-llms "
                f"section 3). Trainable: {trained}.")
    return ("Not a like-for-like comparison: only new-token secrets have their own trainable rows "
            "(finetune.secret_rows is off), so vocabulary secrets can be learned only through the paradigm's weights "
            f"and the kinds differ in parameterisation as well as design. Trainable: {trained}.")


def canary_designs_section(inp: Inputs) -> Section | None:
    head = inp.headline_fpr
    first = inp.bounds[0] if inp.bounds else None
    if head is None:
        return None
    ap = inp.metrics["audit_params"]["primary"]
    cd = Table(["run", "canary kind", "members / non-members", f"TPR@{_pct(head)}FPR [95% CI]", "AUROC [95% CI]",
                f"{_bound_label(first) if first else 'ε̂'} (loss, k₊={ap['k_pos']}, k₋={ap['k_neg']}; corrected)",
                f"TPR@{_pct(head)}FPR ÷ random's"])
    for run, r in inp.runs.items():
        groups = {g: m for g, m in r["attacks"].get("loss", {}).items() if g not in NON_CANARY_GROUPS}
        rnd = groups.get("random", {}).get("tpr_at_fpr", {}).get(head, {}).get("value")
        for kind, m in sorted(groups.items(), key=lambda kv: -kv[1]["tpr_at_fpr"][head]["value"]):
            t = m["tpr_at_fpr"][head]
            ratio = (t["value"] / rnd if rnd else float("inf") if t["value"] else None) if rnd is not None else None
            cd.rows.append([run, kind, f"{m['members']} / {m['non_members']}", ci(t["value"], t["ci95"]),
                            ci(m["auroc"], m["auroc_ci95"]), _family_bound(r, "loss", kind, ap, first), ratio])
    if not cd.rows:
        return None
    guard = inp.metrics.get("sanity_check") or {}
    canary_runs = {run: r["trainable"] for run, r in inp.runs.items()
                   if any(g not in NON_CANARY_GROUPS for g in r["attacks"].get("loss", {}))}
    paras = [_kinds_sentence(canary_runs),
             "Loss attack; the ε̂ column is the kind's test in the exploratory family (Bonferroni-corrected); the last "
             "column divides by the random kind's TPR."]
    if guard:
        worst = min(((k, s_, p) for k, ps in guard["kinds"].items() for s_, p in ps.items()), key=lambda x: x[2])
        paras.append(f"Canary sanity check passed (a check for bugs, not evidence: canary membership is a seeded coin, "
                     f"so "
                     f"members and non-members are exchangeable by construction and the test can fire only by chance "
                     f"or through a bug): members and non-members of every kind agree on prefix length, "
                     f"corpus frequency of prefix and secret and base-model loss of the secret ({guard['tests']} "
                     f"two-sample KS tests at {guard['alpha']:g}/{guard['tests']}; smallest p = {worst[2]:.3g}, "
                     f"{worst[0]}/{worst[1]}).")
    return Section("Canary designs compared", tables=[cd], paragraphs=paras)


def sweeps_section(inp: Inputs) -> Section | None:
    folder = inp.out_dir / "sweeps"
    sweeps = sorted(f for f in folder.glob("*.md") if f.name != "README.md") if folder.is_dir() else []
    if not sweeps:
        return None
    return Section("Sweeps (DVC experiments)", paragraphs=[
        "Written by `python -m flows.sweep`; each row names its DVC experiment and commit "
        "(`dvc exp show --rev <baseline>` has its full params and lineage; experiments live in this repository's "
        "refs/exps, `dvc exp push <remote>` shares them, and reports/sweeps/<name>.json keeps every metric of every "
        "experiment commit)."], verbatim=[f.read_text() for f in sweeps])


def exposure_section(inp: Inputs) -> Section | None:
    ex = Table(["run", "format", "|R|", "inserted", "exposure rate", "mean exposure (inserted)",
                "mean exposure (not inserted)", "max possible"])
    images = []
    for run, r in inp.runs.items():
        if not r.get("exposure"):
            continue
        for fmt_name, m in r["exposure"].items():
            ex.rows.append([run, fmt_name, m["candidates"], m["inserted"], m["exposure_rate"],
                            m["mean_exposure_inserted"], m["mean_exposure_not_inserted"], m["max_exposure"]])
        png = inp.plots_dir / f"exposure_{run}.png"
        exposure_plot(r["exposure"], f"run {run}: exposure vs repetitions", png)
        inp.plot_data("exposure", run, exposure_points(r["exposure"]))
        images.append((f"Run {run}: mean exposure of inserted secret-sharer canaries by number of repetitions", png))
    note = ("Formatted canaries (name, city, email, 5-digit phone, 6 letters, one or three random words; privlm-bench "
            "Table 4), a share of each format's candidates inserted with increasing repetitions. Exposure = log2|R| − "
            "log2 rank of the inserted fill among all candidates by log-perplexity; exposure rate = share of "
            "inserted canaries less perplexing than every non-inserted candidate.")
    return Section("Exposure of secret-sharer canaries", tables=[ex], images=images, paragraphs=[note]) if ex.rows \
        else None


def memorization_section(inp: Inputs) -> Section | None:
    mem = Table(["run", "dataset", "metric", "secrets", "fine-tuned", "base model", "fine-tuned − base [95% CI]",
                 "control: held-out secrets (fine-tuned − base) [95% CI]", "control"])
    for run, r in inp.runs.items():
        for atk, m in (r.get("memorization") or {}).items():
            t, u = m["trained"], m["untrained"]
            c = m.get("control") or {}
            how = (f"randomised: a seeded coin per secret ({c['coin_trained']} trained, {c['coin_held_out']} held "
                   f"out; {c['rows_dropped']} rows with a held-out secret dropped; {c['trained_still_present']} of "
                   f"the {c['coin_trained']} coin-trained secrets still in a training row)") if m.get("randomised") \
                else "NOT randomised: trained = occurs in a training row (confounded by frequency)"
            mem.rows.append([run, r["dataset"], atk.upper(), t["secrets"], t["score"], t["base_score"],
                             ci(t["minus_base"], t["minus_base_ci95"]) if t["secrets"] else "–",
                             f"{ci(u['minus_base'], u['minus_base_ci95'])} (n={u['secrets']})" if u["secrets"] else "–",
                             how])
    if not mem.rows:
        return None
    return Section("Memorization of real secrets", tables=[mem], paragraphs=[
        "VMR: share of 10 sampled continuations (temperature 1, top-k 50) of a secret's prompt s1 that equal "
        "its continuation s2 verbatim; AIR: the author's genre appears in any of 10 sampled answers of at most "
        "20 tokens. The base model's rate is subtracted to remove leakage fine-tuning did not cause. The control: "
        "of the first finetune.secret_control.secrets secrets found in the run's training rows, a seeded coin held "
        "each in or out, and every training row containing a held-out secret was dropped, so the trained and "
        "held-out secrets differ only by training and the difference between the two columns is attributable to "
        "it (the held-out column should be near 0). The comparison is by the coin (intention to treat): a "
        "coin-trained secret whose only rows also held a held-out one was dropped with them and still counts as "
        "trained, which dilutes the trained arm; the control column says how many remained. Where an arm holds more "
        "secrets than are scored (attack.generation.max_secrets; the control as many as the trained arm), the "
        "scored ones are a seeded random draw from that arm (attack.generation.arm_seed), never the secrets file's "
        "order, which is by frequency."])


def _clipping(pv: dict) -> str:
    """A DP run's grad-sample mode (finetune.dp.grad_sample_mode), with auto's reason where it did not pick bk."""
    if not pv.get("dp") or not pv.get("grad_sample_mode"):
        return "—"
    why = pv.get("grad_sample_mode_reason")
    return f"{pv['grad_sample_mode']} (auto: {why})" if why else pv["grad_sample_mode"]


def training_section(inp: Inputs) -> Section:
    tr = Table(["run", "dataset", "DP", "σ", "C", "q", "steps T", "expected exposures q·T", "examples n",
                "valid perplexity", "train seconds", "noise and sampler RNG", "clipping"])
    external = []
    for run, r in inp.runs.items():
        pv, t = r["privacy"], r["training"]
        if pv.get("external"):
            external.append(_external_note(run, pv))
        tr.rows.append([f"{run} (trained elsewhere)" if pv.get("external") else run, r["dataset"], pv.get("dp"), pv.get("noise_multiplier"), pv.get("max_grad_norm"),
                        t["sample_rate"], t["steps"], t["expected_exposures_per_member"], t["n_examples"],
                        r["utility"]["valid_perplexity"], t["train_seconds"],
                        pv.get("rng", "seeded (finetune.seed)") if pv.get("dp") else "—", _clipping(pv)])
    return Section("Training, privacy accounting and utility", tables=[tr], paragraphs=[
        "Poisson sampling at rate q per step; DP runs use opacus DP-SGD (per-example clipping at C, Gaussian "
        "noise σ·C, σ calibrated so the accountant spends the target ε at δ; clipping: how the per-example norms "
        "were computed, `finetune.dp.grad_sample_mode`, with auto's reason where it did not pick bk). Validation "
        "perplexity is on "
        "held-out rows of each run's dataset, on the tokens it trains on (the reply under SFT). A seeded RNG makes a "
        "run reproducible, and its guarantee then assumes the seed is secret; `finetune.dp.secure_rng: true` draws "
        "the sampler and the noise from OS entropy with opacus' secure_mode (for real deployments). A DP run's "
        "published step log holds step indices only: batch sizes, token counts, losses and step times are "
        "functions of the data the accountant does not cover."] + external)


def _external_note(run: str, pv: dict) -> str:
    """What an external run's row means: imported, not trained here; its privacy figures are a claim."""
    text = (f"**Run {run} was trained outside the pipeline** (`finetune.external`: the model was imported and "
            "attacked and audited unchanged; its members are the exported canaries, its sealed membership file's "
            "sha-256 is in run.json). Its training columns are unknown here. ")
    if not pv.get("dp"):
        return text + "No DP guarantee was claimed for it."
    ours = pv["accountant_epsilon_of_claim"]
    text += (f"Its ε = {fmt(pv['epsilon_spent'])} at δ = {pv['delta']:.2g}, σ, and q, T are **the trainer's "
             f"claim, not measured**; our accountant (PRV) gives ε = {fmt(ours)} for the claimed σ, q, T.")
    if ours > pv["epsilon_spent"] * 1.01:
        text += " **The claim is inconsistent: its own σ, q, T spend more than the ε it states.**"
    return text


def _processed(inp: Inputs, marker: str) -> list[Path]:
    folder = inp.where.processed
    return sorted(p for p in folder.iterdir() if (p / marker).is_file()) if folder.is_dir() else []


def data_section(inp: Inputs) -> Section:
    data = Section("Data", paragraphs=[
        "Counts after each preprocessing step, per dataset (the source path is the one dvc.lock recorded; "
        "`data/raw/...` = the small real samples vendored in the repository, not the full corpora)."])
    for ds_dir in _processed(inp, "stats.parquet"):
        st = read_table(ds_dir / "stats.parquet", STATS).to_pylist()
        rec = lin.stage_record(inp.lock, f"preprocess@{ds_dir.name}") or {"params": {}}
        src = (rec["params"].get(f"preprocess.datasets.{ds_dir.name}") or {}).get("path", "?")
        data.tables.append(Table([f"{ds_dir.name} ({src}): step", "count"], [[s["step"], s["count"]] for s in st]))
    return data


def contracts_section(inp: Inputs) -> Section:
    ct = Table(["dataset", "suite", "expectation", "column", "observed", "ok"])
    found = {d.name: d / "gx_results.json" for d in _processed(inp, "gx_results.json")}
    for name, path in found.items():
        for suite, rep in read_json(path).items():
            for r in rep["results"]:
                obs = r.get("observed_value")
                if obs is None and r.get("unexpected_count") is not None:
                    obs = f"{r['unexpected_count']} of {r['element_count']} unexpected"
                ct.rows.append([name, suite, r["expectation"], r["kwargs"].get("column", ""), obs, r["success"]])
    docs = build_data_docs(found, inp.out_dir / "data_docs")
    return Section("Data contracts (Great Expectations)", tables=[ct], paragraphs=[
        "Every processed dataset is checked against its pyarrow schema and a Great Expectations suite before "
        "it is written; a violation fails its stage. Observed values are aggregates (no row contents). "
        f"GX Data Docs: `{(inp.out_dir / 'data_docs' / 'index.html').as_posix()}` ({len(docs)} suite pages)."])


def secrets_section(inp: Inputs) -> Section:
    stt = Table(["dataset", "kind", "secrets", "mean occurrences", "base reproduces", "mean base log-prob"])
    folder = inp.where.secrets
    for f in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
        t = read_table(f, SECRETS).to_pandas()
        for kind, g in t.groupby("kind"):
            stt.rows.append([f.stem, kind, len(g), float(g["occurrences"].mean()),
                             f"{int(g['base_greedy'].fillna(False).sum())} / {len(g)}",
                             float(g["base_logprob"].mean()) if g["base_logprob"].notna().any() else None])
    return Section("Real secrets in the training data", tables=[stt], paragraphs=[
        "Secrets extracted from the training splits (values are not shown). `base reproduces` = the base model "
        "already continues the prompt with the secret greedily, i.e. leakage that fine-tuning did not cause; "
        "later memorization metrics subtract it."])


def lineage_section(inp: Inputs) -> Section:
    lt = Table(["stage", "params read", "inputs (path: md5)", "outputs (path: md5)"])
    for s in ["audit"] + lin.upstream(inp.lock, "audit"):
        rec = lin.stage_record(inp.lock, s)
        if rec is None:
            continue
        params = ", ".join(f"{k}" for k in rec["params"]) or "–"
        lt.rows.append([s, params, "; ".join(f"{d['path']}: {_short(d['md5'])}" for d in rec["deps"]),
                        "; ".join(f"{o['path']}: {_short(o['md5'])}" for o in rec["outs"])])
    return Section("Lineage", tables=[lt], paragraphs=[
        "Every number above is in `reports/metrics.json` (written by the `audit` stage); "
        "`reports/lineage.json` maps each of its JSON paths to the producing stage, the md5 of that stage's "
        "inputs and its params as recorded in dvc.lock, the upstream stages and the git commit. "
        "The table lists each stage in the chain as dvc.lock records it (md5 prefixes; `.dir` = directory)."])


#: the report's sections, in order; a section with nothing to show returns None and is left out
SECTIONS = (headline_section, summary_section, lambda inp: selfcheck_section(inp.selfcheck), audit_section,
            ceiling_section,
            lambda inp: response_section(inp.runs), lambda inp: study_section(inp.study_dir),
            exploratory_section, mia_section, blind_section,
            canary_designs_section, sweeps_section, lambda inp: variance_section(inp.variance_dir), exposure_section,
            memorization_section, training_section, data_section, contracts_section, secrets_section,
            headline_lineage_section, lineage_section)


def build_report(title: str, where: Locations, lock_path: Path, out_dir: Path, root: Path = Path("."),
                 variance_dir: Path | None = None, study_dir: Path | None = None,
                 selfcheck: Path | None = None) -> dict:
    """Write report.md, index.html, the plots and lineage.json into ``out_dir``; returns the lineage."""
    lock = lin.load_lock(lock_path)
    git = lin.git_state(root)
    metrics = read_metrics(where.metrics)
    verified = lin.verify_outputs(lock, "audit")
    inp = Inputs(metrics, read_roc(where.roc), where, lock, git, verified, out_dir / "plots", out_dir,
                 number_lineage(metrics, lock, git, verified),
                 {r: read_record(where.scores_dir(r))["run_record"].get("base_model", {}) for r in metrics["runs"]},
                 variance_dir, study_dir, selfcheck)
    sections = [s for s in (section(inp) for section in SECTIONS) if s is not None]
    with atomic_file(out_dir / "report.md") as tmp:
        tmp.write_text(to_markdown(title, sections, out_dir))
    with atomic_file(out_dir / "index.html") as tmp:
        tmp.write_text(to_html(title, sections))
    heads = inp.heads
    with atomic_file(out_dir / "headline.md") as tmp:  # the Prefect run's markdown artifact
        tmp.write_text(headline_markdown(heads, link=False))
    write_json(out_dir / "headline.json", headline_metrics(heads, flatten(metrics, numbers_only=True), inp.runs,
                                                           inp.bounds))
    write_json(out_dir / "lineage.json", inp.lineage)
    return inp.lineage
