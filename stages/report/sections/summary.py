"""Summary: commit, dvc.lock check, base model, what the canaries and data are, and the primary test."""
from __future__ import annotations

from ...audit.schema import AuditParamsRecord
from ...shared.core.formatting import fmt
from ..inputs import Inputs
from ..render import Section


def summary_section(inp: Inputs) -> Section:
    git, ap = inp.git, inp.metrics.audit_params
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
        + (f"{ap.delta:g} for every run" if ap.delta is not None else
           f"the run's own δ for DP runs (so ε̂ and the accountant's ε are at the same δ) and "
           f"{ap.fallback_delta:g} for runs without DP") + "."
        + " AUROC and TPR intervals: 95% stratified "
        f"bootstrap over members and non-members ({ap.bootstrap} resamples). TPR at FPR x is the best "
        "TPR at an empirical FPR ≤ x (no interpolation).",
    ])


def _primary_sentence(ap: AuditParamsRecord) -> str:
    p = ap.primary  # audit.primary as registered (a params echo: a dict)
    return (f"Headline ε̂ of every run with canaries: one one-run test (Steinke et al. 2023) fixed in "
            f"params.yaml `audit.primary` — the `{p['attack']}` score on `{p['kind']}` "
            f"canaries, the {p['k_pos']} highest guessed \"in\" and the {p['k_neg']} lowest \"out\"; ε̂ is the "
            "largest ε whose (ε, δ)-DP null hypothesis that test rejects at the stated confidence. The bound holds "
            "only if this choice was made before the scores were seen, and it is a confirmation only on a seed set "
            "whose first recorded run (the seed ledger, reports/audit_study/seed_ledger.json) is this design, on "
            "seeds committed before it and never used to choose a design (`audit.seeds`); any other run's bound is a "
            "development look; a DP recipe run as independent replicas (`replicas`) leads with its "
            "pooled test over all of them (`audit.pooled`). `git log -p params.yaml` shows when "
            "`audit.primary` "
            "last changed, and dvc.lock records the value this audit used (params sha256 "
            f"`{(ap.primary_sha256 or '?')[:16]}…`; reports/lineage.json gives every number's params, inputs "
            "and commit). Every other attack × kind × "
            "guess-count bound is exploratory and Bonferroni-corrected over its family; no uncorrected maximum is "
            "reported as a bound.")
