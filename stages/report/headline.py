"""The report's headline block: per run, what was trained and the few numbers a reviewer signs — the
accountant's ε, the audit's primary ε̂ (worded by its seed ledger status) with its attainable ceiling, the largest
attack TPR at the headline FPR (labelled as the largest of N, not a test), memorization and utility — each tied to its
metrics.json path (its lineage id), and one plain-language sentence reading them together.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath

from ..audit.schema import (
    AuditUser,
    GroupMetrics,
    Memorization,
    Pooled,
    Primary,
    RunMetrics,
    Verdict,
)
from ..finetune.schema import PrivacyRecord
from ..shared.bounds.keys import BoundKeys, mcse_key
from ..shared.core.formatting import ci, fmt
from .figures import is_confirmation, mc, optimizer_label, status_words

#: headline.json keys of the memorization figures (fine-tuned minus base, trained secrets)
MINUS_BASE_KEYS = {"vmr": "vmr_minus_base", "air": "air_minus_base", "acr": "acr_minus_base"}


def secret_seed_clause(privacy: PrivacyRecord) -> str:
    """What the accountant's epsilon assumes about the randomness (only a secure-RNG run bounds the true epsilon)."""
    if privacy.secure_rng:
        return ""
    return " (the accountant's ε assumes the seed is secret; this run's seed is in params)"


@dataclass(frozen=True)
class Figure:
    label: str
    text: str
    path: str | None = None  # dotted path in reports/metrics.json = the number's lineage id
    note: str = ""  # the assumption or qualifier stated next to the number
    key: str = ""  # its name in reports/headline.json (`dvc metrics diff`)


@dataclass
class Headline:
    run: str
    trained: str
    figures: list[Figure] = field(default_factory=list)
    reading: str = ""


def model_name(name_or_path: str | None) -> str:
    """The base model as a card names it: a hub id or package as given, a local directory by its own name (an absolute
    path would tie the report to one machine)."""
    if not name_or_path:
        return "?"
    path = PurePath(name_or_path)
    return path.name if path.is_absolute() else name_or_path


def _trained(r: RunMetrics, base: dict) -> str:
    pv, t = r.privacy, r.trainable
    unit = (f"user-level (a user's rows, at most {pv.rows_per_user} a step, clipped as one unit; q over users)"
            if pv.unit == "user" else "example-level")
    dp = (f"{optimizer_label(pv.optimizer)}, {unit}, target ε = {fmt(pv.target_epsilon, 2)} at δ = "
          f"{pv.delta:.0e}, σ = {fmt(pv.noise_multiplier, 3)}" if pv.dp else "no DP")
    n = base.get("num_parameters")
    size = f"{n / 1e6:,.0f}M parameters" if n else "? parameters"
    return (f"{model_name(base.get('name_or_path'))} ({size}), {t.paradigm} "
            f"fine-tuning on {r.dataset}, {r.training.steps} steps "
            f"at q = {fmt(r.training.sample_rate)}, "
            f"{dp}")


def strongest_attack(r: RunMetrics, fpr: str) -> tuple[str, str, GroupMetrics] | None:
    """(attack, group, metrics) with the highest TPR at ``fpr`` over pools the blind baseline did not invalidate
    and, where any has, that are large enough for an interval (ties: higher AUROC). Picked after scoring, so it is
    descriptive, not a test: it is printed as "the largest of N", without an interval or any confidence wording
    (an uncorrected maximum's interval would claim too much)."""
    return max(candidates(r, fpr), key=lambda c: (c[2].tpr_at_fpr[fpr].value, c[2].auroc), default=None)


def candidates(r: RunMetrics, fpr: str) -> list[tuple[str, str, GroupMetrics]]:
    """The attack x pool results the strongest attack is the largest of (its "N")."""
    blind = r.blind or {}
    cands = [(atk, g, m) for atk, groups in r.attacks.items() for g, m in groups.items()
             if fpr in m.tpr_at_fpr and not (g in blind and blind[g].flagged)]
    # a pool too small for an interval (audit.min_per_side) has a TPR in steps of 1/members: a maximum would favour it
    return [c for c in cands if c[2].auroc_ci95 is not None] or cands


def _pooled_figures(run: str, pooled: Pooled | None, bounds: list[BoundKeys]) -> list[Figure]:
    """The recipe's pooled test: the headline bound of a recipe run as K replicas, worded by its seed status."""
    if not pooled or not bounds:
        return []
    pre, labels = f"pooled.{run}", " / ".join(b.tag + "%" for b in bounds)
    k = len(pooled.runs)
    figs = [Figure(f"pooled audit ε̂, {k} runs ({labels}, δ = {pooled.delta:.0e})",
                   " / ".join(fmt(pooled.bounds.get(b.eps_lb), 2) for b in bounds), f"{pre}.{bounds[0].eps_lb}",
                   f"{status_words(pooled, short=True)}; {pooled.v} of {pooled.r} right, m {pooled.m}; "
                   "assumption-free",
                   bounds[0].headline("pooled"))]
    return figs


def _gdp_note(privacy: PrivacyRecord) -> str:
    """What the Gaussian-DP bound rests on, per run: for a DP run the assumption that its trade-off curve is Gaussian
    (exact only at q = 1, which DP-SGD at q < 1 does not meet); a run without DP has no mechanism the curve could be
    exact for, so the figure is only the epsilon of the Gaussian mechanism that these guesses reject."""
    if not privacy.dp:
        return "no DP here: the ε of the Gaussian mechanism these guesses reject (assumes a Gaussian trade-off curve)"
    q = privacy.sample_rate
    if q is not None and q < 1:
        return (f"the same guesses under an assumed Gaussian trade-off curve: exact only at q = 1, which DP-SGD at "
                f"q = {fmt(q, 2)} < 1 does not meet (its composed subsampled curve is not Gaussian)")
    return ("the same guesses under an assumed Gaussian trade-off curve (DP-SGD's composed curve is Gaussian at "
            "q = 1, as here)")


def _audit_figures(run: str, r: RunMetrics, bounds: list[BoundKeys], threats: dict[str, str],
                   pooled: Pooled | None = None) -> list[Figure]:
    p, pv, pre = r.audit_primary, r.privacy, f"runs.{run}"
    figs = [Figure(f"accountant ε (δ = {pv.delta:.0e})", fmt(pv.epsilon_spent, 2),
                   f"{pre}.privacy.epsilon_spent", f"{(pv.accountant or '?').upper()} accountant",
                   "accountant_epsilon")] if pv.dp else \
        [Figure("accountant ε", "∞ (no DP)")]
    if r.audit_user is not None and bounds:
        figs += _user_audit_figures(run, r.audit_user, bounds)
    if p is None or not bounds:
        return figs + ([] if r.audit_user is not None else [Figure("audit ε̂", "– (no canaries)")])
    figs += _pooled_figures(run, pooled, bounds)
    labels = " / ".join(b.tag + "%" for b in bounds)
    alone = "this run alone: " if pooled else ""
    figs.append(Figure(f"{alone}audit ε̂ ({labels}, δ = {p.delta:.0e})",
                       " / ".join(fmt(p.bounds.get(b.eps_lb), 2) for b in bounds),
                       f"{pre}.audit_primary.{bounds[0].eps_lb}",
                       f"{status_words(p, short=True)}; {p.attack} on {p.kind} canaries "
                       f"({threats.get(p.attack, '?')}), "
                       f"{p.v} of {p.r} guesses right; assumption-free", bounds[0].headline("audit")))
    if pooled:  # the single run's other bounds are in the audit section
        return figs
    if p.bounds.get(bounds[0].gdp_eps_lb) is not None:
        figs.append(Figure(f"{alone}audit ε̂, Gaussian curve assumed ({labels})",
                           " / ".join(fmt(p.bounds.get(b.gdp_eps_lb), 2) for b in bounds),
                           f"{pre}.audit_primary.{bounds[0].gdp_eps_lb}",
                           _gdp_note(pv), bounds[0].headline("audit_gdp")))
    ideal = bounds[0].ideal()
    if p.bounds.get(ideal) is not None:
        figs.append(Figure(f"{alone}ideal ε̂ ({bounds[0].tag}%, median)", mc(p, ideal, 2),
                           f"{pre}.audit_primary.{ideal}", "median of simulated audits of an ideal white-box canary "
                           "(heuristic linear model; a valid audit can exceed it)"
                           + (f", ± its Monte Carlo standard error over "
                              f"{'?' if p.ideal_trials is None else p.ideal_trials} trials"
                              if p.bounds.get(mcse_key(ideal)) is not None else ""),
                           bounds[0].headline("attainable")))
    return figs


def _user_audit_figures(run: str, u: AuditUser, bounds: list[BoundKeys]) -> list[Figure]:
    """The user-level one-run test over the audit users (metrics.json ``audit_user``) and, for a DP run, its ideal."""
    pre, labels = f"runs.{run}.audit_user", " / ".join(b.tag + "%" for b in bounds)
    figs = [Figure(f"user-level audit ε̂ ({labels}, δ = {u.delta:.0e})",
                   " / ".join(fmt(u.bounds.get(b.eps_lb), 2) for b in bounds), f"{pre}.{bounds[0].eps_lb}",
                   f"{status_words(u, short=True)}; {u.attack} summed over each user's {u.k} rows, "
                   f"{u.v} of {u.r} right over {u.m} canary users; assumption-free",
                   bounds[0].headline("audit_user"))]
    ideal = bounds[0].ideal()
    if u.bounds.get(ideal) is not None:
        figs.append(Figure(f"ideal user-level ε̂ ({bounds[0].tag}%, median)", mc(u, ideal, 2), f"{pre}.{ideal}",
                           f"{u.mechanism_unit}-level DP, {u.k} rows per user: linear model (heuristic; a "
                           f"real audit can exceed it); this count at percentile {mc(u, 'ideal_percentile', 1)}",
                           bounds[0].headline("attainable_user")))
    return figs


def _user_figures(run: str, r: RunMetrics) -> list[Figure]:
    """User inference, where the run has it: held-in vs held-out users' AUROC with its interval (or exact p) and the
    blind baseline's on the same users (a shift check: where it is flagged, the AUROC measures the shift)."""
    m = (r.attacks.get("user_inference") or {}).get("users")
    if m is None:
        return []
    b = (r.blind or {}).get("users")
    blind = (f"; blind baseline AUROC {ci(b.auroc, b.auroc_ci95)}, p {fmt(b.p_value, 3)}"
             + (" — FLAGGED: the AUROC measures a shift" if b.flagged else "")) if b is not None else \
        "; no blind baseline on these users"
    return [Figure("user inference AUROC", ci(m.auroc, m.auroc_ci95, m.auroc_p_exact),
                   f"runs.{run}.attacks.user_inference.users.auroc",
                   f"{m.members} held-in vs {m.non_members} held-out users, per user the mean "
                   f"{r.user_score or '?'} over the attacker's samples{blind}", "user_inference_auroc")]


def _leak_figures(run: str, r: RunMetrics, fpr: str | None) -> list[Figure]:
    pre, figs = f"runs.{run}", _user_figures(run, r)
    best = strongest_attack(r, fpr) if fpr else None
    if best:
        atk, group, m = best
        t = m.tpr_at_fpr[fpr]
        figs.append(Figure(f"largest attack TPR @ {float(fpr) * 100:g}% FPR", fmt(t.value),
                           f"{pre}.attacks.{atk}.{group}.tpr_at_fpr.{fpr}.value",
                           f"{atk} on {group}, {_at_fpr(fpr, m)}: largest of {len(candidates(r, fpr))} attack × "
                           f"pool results, not a test{_guard_note(r, group)}", "strongest_tpr"))
    ex = (r.exposure or {}).get("all")
    if ex is not None:
        figs.append(Figure("exposure, inserted vs not", f"{fmt(ex.mean_exposure_inserted, 2)} vs "
                           f"{fmt(ex.mean_exposure_not_inserted, 2)} bits",
                           f"{pre}.exposure.all.mean_exposure_inserted",
                           f"secret-sharer canaries, max {fmt(ex.max_exposure, 2)}", "exposure_inserted"))
    for metric, mem in (r.memorization or {}).items():
        figs.append(_memorization_figure(pre, metric, mem))
    figs.append(Figure("validation perplexity", fmt(r.utility.valid_perplexity, 1),
                       f"{pre}.utility.valid_perplexity", "utility", "valid_perplexity"))
    return figs


def _memorization_figure(pre: str, metric: str, m: Memorization) -> Figure:
    t = m.trained
    return Figure(f"{metric.upper()} fine-tuned − base", ci(t.minus_base, t.minus_base_ci95),
                  f"{pre}.memorization.{metric}.trained.minus_base",
                  f"{t.secrets} real secrets" + (", randomised control" if m.randomised else ""),
                  MINUS_BASE_KEYS[metric])


def reading(r: RunMetrics, bounds: list[BoundKeys], fpr: str | None, pooled: Pooled | None = None) -> str:
    """One plain-language sentence on what the numbers together say: every bound with its confidence and delta; a
    development seed's bound as a look; "the true epsilon lies between" only where the accountant's epsilon is a
    guarantee about the released randomness (a secure-RNG run)."""
    p, pv = r.audit_primary, r.privacy
    if p is None and r.audit_user is not None and bounds:
        return _user_reading(r.audit_user, pv, bounds)
    if p is None or not bounds:
        return _attack_reading(r, fpr)
    test: Primary | Pooled = pooled if pooled else p
    lb, conf, delta = test.bounds.get(bounds[0].eps_lb) or 0.0, bounds[0].tag, test.delta
    at = f"at {conf}% confidence (δ = {delta:.0e})"
    development = not is_confirmation(test)
    what = (f"pooled test over {len(pooled.runs)} independent runs of this recipe" if pooled
            else "audit's one test")
    seeds = ", ".join(map(str, test.seeds or []))
    what = f"the {what}, a development look (seeds {seeds}; seed ledger: not evidence)," if development else \
        f"the {what}, on a confirmation set (seeds {seeds}; seed ledger),"
    ideal = test.bounds.get(bounds[0].ideal())
    ceiling = (f"; ideal canaries (heuristic) give a median ε̂ of {mc(test, bounds[0].ideal(), 2)}, this "
               f"count sits at their percentile {mc(test, 'ideal_percentile', 1)}"
               if ideal is not None and test.ideal_percentile is not None else "")
    if pv.dp and lb > pv.epsilon_spent:
        return (f"INCONSISTENT with the accountant: {what} gives ε ≥ {lb:.2f} {at}, above the accountant's "
                f"ε = {pv.epsilon_spent:.2f} at δ = {pv.delta:.0e} — a bug or a broken DP guarantee.")
    if pv.dp:
        secure = not secret_seed_clause(pv)
        if lb > 0:
            between = (f", so the true ε lies between {lb:.2f} and {pv.epsilon_spent:.2f} {at}" if secure and
                       not development else secret_seed_clause(pv))
            found = f"gives ε ≥ {lb:.2f} {at}{between}"
        else:
            found = f"finds no leakage it can show (ε̂ = 0 {at}){secret_seed_clause(pv)}"
        return (f"Consistent with the accountant (ε = {pv.epsilon_spent:.2f} at δ = {pv.delta:.0e}, "
                f"{optimizer_label(pv.optimizer)}): {what} {found}{ceiling}.")
    most = p.bounds.get(bounds[0].stat("max_provable_eps_lb"))
    cap = f" ({p.r} guesses, all right, can show at most ε ≥ {most:.2f} {at})" if most is not None else ""
    if lb > 0:
        return f"No DP guarantee, and {what} shows this run leaks: ε ≥ {lb:.2f} {at}{cap}."
    return (f"No DP guarantee; {what} finds no leakage it can show (ε̂ = 0 {at}) — absence of evidence, not a "
            f"guarantee{cap}.")


def _user_reading(u: AuditUser, pv: PrivacyRecord, bounds: list[BoundKeys]) -> str:
    """The sentence of a run whose test is over canary users: what the user-level bound says beside the accountant's
    epsilon about the run's own unit (a user-level guarantee bounds it; an example-level one does not)."""
    lb, at = u.bounds.get(bounds[0].eps_lb) or 0.0, f"at {bounds[0].tag}% confidence (δ = {u.delta:.0e})"
    look = "" if is_confirmation(u) else " — a development look (seed ledger: not evidence)"
    test = f"the one-run test over {u.m} canary users of {u.k} rows each"
    if not pv.dp:
        return f"No DP guarantee; {test} gives ε ≥ {lb:.2f} per user {at}{look}."
    unit = pv.unit or "example"
    if unit == "user" and lb > pv.epsilon_spent:
        return (f"INCONSISTENT with the accountant: {test} gives ε ≥ {lb:.2f} {at}, above its user-level "
                f"ε = {pv.epsilon_spent:.2f} — a bug or a broken DP guarantee.")
    what = ("a guarantee about users, so the bound must stay below it" if unit == "user" else
            "a guarantee about rows: a user with k rows gets only group privacy, so a user-level bound may exceed it")
    return (f"The accountant's ε = {pv.epsilon_spent:.2f} at δ = {pv.delta:.0e} is {what}; {test} gives "
            f"ε ≥ {lb:.2f} {at}{look}.")


def zero_fp(fpr: str, non_members: int) -> bool:
    """With fewer than 1 / FPR non-members the only empirical FPR at or below it is 0: the TPR is at zero false
    positives."""
    return float(fpr) * non_members < 1


def _at_fpr(fpr: str, m: GroupMetrics) -> str:
    """ "at x% FPR", or, where the pool has fewer than 1/x non-members, what the figure is: TPR at 0 false positives."""
    if zero_fp(fpr, m.non_members):
        return f"at 0 false positives ({float(fpr) * 100:g}% of {m.non_members} non-members is below one)"
    return f"at {float(fpr) * 100:g}% FPR"


def _guard_note(r: RunMetrics, group: str) -> str:
    """The shift guard's word on a non-randomised pool where it could not rule a shift out."""
    b = (r.blind or {}).get(group)
    return "; its pool's shift guard is too weak at this size" if b is not None and b.verdict is Verdict.TOO_WEAK \
        else ""


def _attack_reading(r: RunMetrics, fpr: str | None) -> str:
    best = strongest_attack(r, fpr) if fpr else None
    if not best:
        return "No canaries and no attack at the headline FPR: nothing here bounds or measures leakage."
    atk, group, m = best
    t = m.tpr_at_fpr[fpr].value
    return (f"No canaries, so no audit bound. The largest of {len(candidates(r, fpr))} attack × pool results is "
            f"{atk} on {group}, TPR {t:.2f} {_at_fpr(fpr, m)}; it was picked after scoring, so it is not a "
            f"test{_guard_note(r, group)}."
            + (" No DP guarantee." if not r.privacy.dp else ""))


def headlines(runs: dict[str, RunMetrics], bases: dict[str, dict], bounds: list[BoundKeys], fpr: str | None,
              pooled: dict[str, Pooled] | None = None, threats: dict[str, str] | None = None) -> list[Headline]:
    """Per run; a recipe with a pooled test (``pooled``: metrics.json ``pooled``) leads with it; ``threats``: attack
    -> the threat model it declares (the attack records); ``bases``: run -> its base model (source.json)."""
    pooled, threats = pooled or {}, threats or {}
    return [Headline(run, _trained(r, bases.get(run, {})),
                     _audit_figures(run, r, bounds, threats, pooled.get(run)) + _leak_figures(run, r, fpr),
                     reading(r, bounds, fpr, pooled.get(run))) for run, r in runs.items()]


def headline_markdown(heads: list[Headline], link: bool = True) -> str:
    """The block as markdown (the report's top and the Prefect artifact); values link to their lineage anchors."""
    out = []
    for h in heads:
        out += [f"### {h.run}", "", h.trained + ".", "", "| | value | note |", "|---|---|---|"]
        for f in h.figures:
            value = f"[{f.text}](#{anchor(f.path)})" if (link and f.path) else f.text
            out.append(f"| {f.label} | {value} | {f.note} |")
        out += ["", f"**Reading:** {h.reading}", ""]
    return "\n".join(out)


def anchor(path: str) -> str:
    """HTML id of a number's lineage entry."""
    return "lin-" + "".join(c if c.isalnum() or c in "-_." else "-" for c in path)


def headline_html(heads: list[Headline]) -> str:
    """One card per run, side by side, sized to sit on the first screen."""
    import html

    cards = []
    for h in heads:
        rows = "".join(
            f"<tr><th>{html.escape(f.label)}</th><td>"
            + (f'<a href="#{anchor(f.path)}">{html.escape(f.text)}</a>' if f.path else html.escape(f.text))
            + (f'<div class="note">{html.escape(f.note)}</div>' if f.note else "") + "</td></tr>"
            for f in h.figures)
        cards.append(f'<div class="card" id="headline-{html.escape(h.run)}"><h3>{html.escape(h.run)}</h3>'
                     f'<p class="trained">{html.escape(h.trained)}</p><table>{rows}</table>'
                     f'<p class="reading">{html.escape(h.reading)}</p></div>')
    return f'<section id="headline" class="cards">{"".join(cards)}</section>'


def headline_metrics(heads: list[Headline], numbers: dict, runs: dict[str, RunMetrics],
                     bounds: list[BoundKeys]) -> dict:
    """reports/headline.json: run -> the headline numbers by key (every bound of the primary test), for
    `dvc metrics diff` between experiments. ``numbers``: metrics.json flattened (dotted path -> number)."""
    out = {}
    for h in heads:
        vals = {f.key: numbers[f.path] for f in h.figures if f.key and f.path in numbers}
        primary = runs[h.run].audit_primary
        got = primary.bounds if primary is not None else {}
        vals.update({b.headline("audit"): got[b.eps_lb] for b in bounds if got.get(b.eps_lb) is not None})
        out[h.run] = vals
    return out
