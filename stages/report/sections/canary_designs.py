"""Canary designs compared: each kind's loss-attack TPR, AUROC and corrected bound, and what the comparison rests on."""
from __future__ import annotations

from ...audit.schema import NON_CANARY_GROUPS, RunMetrics, TrainableSummary
from ...shared.bounds.keys import BoundKeys, clip_guesses
from ...shared.core.formatting import Table, ci
from ..inputs import Inputs, pct
from ..render import Section


def _family_bound(r: RunMetrics, attack: str, kind: str, primary: dict, keys: BoundKeys | None) -> float | None:
    """The Bonferroni-corrected bound of (attack, kind) at the primary's guess counts, from the exploratory family
    (None when that (k_pos, k_neg) is not in its grid)."""
    for t in r.audit_exploratory.tests if r.audit_exploratory else []:
        if (kind == t.kind and attack in [t.attack, *t.same_ranking] and keys
                and (t.k_pos, t.k_neg) == clip_guesses(primary["k_pos"], primary["k_neg"], t.m)):
            return t.bounds.get(keys.eps_lb)
    return None


def _trainable_text(t: TrainableSummary) -> str:
    if t.paradigm == "external":
        return "trained elsewhere: which parameters were trained is the trainer's, not known here"
    what = {"lora": f"LoRA r={t.lora_r} on {', '.join(t.lora_targets or [])}",
            "full": "every decoder weight (the tied embedding matrix frozen)",
            "prompt": f"a {t.virtual_tokens}-token soft prompt",
            "prefix": f"a {t.virtual_tokens}-token key/value prefix"}[t.paradigm]
    return (f"{what}, plus own input and output rows for {t.new_token_rows} new tokens and for "
            f"{t.secret_token_rows} vocabulary tokens ({t.parameters:,} trainable parameters)")


def _kinds_sentence(runs: dict[str, TrainableSummary]) -> str:
    """What the kind comparison rests on: the same parameters for every kind's secret tokens, or not."""
    external = [run for run, t in runs.items() if t.paradigm == "external"]
    runs = {run: t for run, t in runs.items() if run not in external}
    fair = all(t.secret_rows for t in runs.values())
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
    ap = inp.metrics.audit_params.primary
    cd = Table(["run", "canary kind", "members / non-members", f"TPR@{pct(head)}FPR [95% CI]", "AUROC [95% CI]",
                f"{first.label if first else 'ε̂'} (loss, k₊={ap['k_pos']}, k₋={ap['k_neg']}; corrected)",
                f"TPR@{pct(head)}FPR ÷ random's"])
    for run, r in inp.runs.items():
        groups = {g: m for g, m in r.attacks.get("loss", {}).items() if g not in NON_CANARY_GROUPS}
        random_at = groups["random"].tpr_at_fpr.get(head) if "random" in groups else None
        rnd = random_at.value if random_at else None
        for kind, m in sorted(groups.items(), key=lambda kv: -kv[1].tpr_at_fpr[head].value):
            t = m.tpr_at_fpr[head]
            ratio = (t.value / rnd if rnd else float("inf") if t.value else None) if rnd is not None else None
            cd.rows.append([run, kind, f"{m.members} / {m.non_members}", ci(t.value, t.ci95),
                            ci(m.auroc, m.auroc_ci95), _family_bound(r, "loss", kind, ap, first), ratio])
    if not cd.rows:
        return None
    guard = inp.metrics.sanity_check
    canary_runs = {run: r.trainable for run, r in inp.runs.items()
                   if any(g not in NON_CANARY_GROUPS for g in r.attacks.get("loss", {}))}
    paras = [_kinds_sentence(canary_runs),
             "Loss attack; the ε̂ column is the kind's test in the exploratory family (Bonferroni-corrected); the last "
             "column divides by the random kind's TPR."]
    if guard is not None:
        worst = min(((k, s_, p) for k, ps in guard.kinds.items() for s_, p in ps.items()), key=lambda x: x[2])
        paras.append(f"Canary sanity check passed (a check for bugs, not evidence: canary membership is a seeded coin, "
                     f"so "
                     f"members and non-members are exchangeable by construction and the test can fire only by chance "
                     f"or through a bug): members and non-members of every kind agree on prefix length, "
                     f"corpus frequency of prefix and secret and base-model loss of the secret ({guard.tests} "
                     f"two-sample KS tests at {guard.alpha:g}/{guard.tests}; smallest p = {worst[2]:.3g}, "
                     f"{worst[0]}/{worst[1]}).")
    return Section("Canary designs compared", tables=[cd], paragraphs=paras)
