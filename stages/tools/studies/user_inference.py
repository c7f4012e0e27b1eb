"""User inference with power (user-inference-attacks Algorithm 1, Figure 6): canary users over every author of a
user-level dataset, half held in, scored by the user-inference attack on the non-DP run and on example-level and
user-level DP-SGD at one (epsilon, delta), per substring length (one experiment each) and per number of documents a
held-in user was trained on (within each experiment: ``canaries.users.documents``).

The design (studies.yaml ``user_inference``) is fixed before its runs: the dataset, the lengths, the canary users per
length, the documents per held-in user, the attack, the seed and the predicted directions. The recipe every
mechanism shares is presets/user_inference.args; the rows of reports/user_inference.json come from one experiment's
metrics.json (``inference_rows``).
"""
from __future__ import annotations

from ...audit.schema import Metrics
from ...shared.studies.user_inference import UserInferenceStudyParams  # noqa: F401  (read here and by the flow)

#: the study's three mechanisms: run name -> (mechanism, DP unit or None)
MECHANISMS = {"ui_nondp": ("no DP", None), "ui_example": ("example-level DP-SGD", "example"),
              "ui_user": ("user-level DP-SGD", "user")}
#: the keys of a reports/user_inference.json row (``documents``: a count, "all", or "mixed" for the length's
#: held-in users of every count together)
ROW_KEYS = ("mechanism", "unit", "epsilon", "delta", "length", "documents", "members", "non_members", "auroc",
            "auroc_ci95", "auroc_p_exact", "valid_perplexity", "seed", "design_commit")


def study_overrides(design: UserInferenceStudyParams, length: int) -> list[str]:
    """The design's overrides of one experiment (after the preset's): the canary users at ``length`` and the seed
    of every draw (the canary users' stream, each mechanism's fine-tune); the caller checks ``length`` is one of the
    design's."""
    docs = ",".join("null" if d is None else str(d) for d in design.documents)
    return [f"canaries.users.dataset={design.dataset}", f"canaries.users.lengths=[{length}]",
            f"canaries.users.per_length={design.per_length}", f"canaries.users.documents=[{docs}]",
            f"canaries.users.seed={design.seed}", "canaries.users.enabled=true",
            *[f"++runs.{run}.seed={design.seed}" for run in MECHANISMS],
            *[f"++attack.runs.{run}=[{design.attack}]" for run in MECHANISMS]]


def inference_rows(metrics: Metrics, attack: str, length: int, seed: int, design_commit: str | None) -> list[dict]:
    """Per mechanism: the length's canary users together ("mixed" documents), then each documents count's held-in
    users against every held-out user of the length, from one experiment's metrics.json (its ``Metrics`` record)."""
    rows = []
    for run, (label, unit) in MECHANISMS.items():
        r = metrics.runs[run]
        pv = r.privacy
        common = {"mechanism": label, "unit": unit, "epsilon": pv.epsilon_spent if pv.dp else None,
                  "delta": pv.delta if pv.dp else None, "length": length,
                  "valid_perplexity": r.utility.valid_perplexity, "seed": seed, "design_commit": design_commit}
        cells = [("mixed", (r.canary_users_by_length or {})[attack][str(length)])]
        cells += sorted(((key.split(":", 1)[1], m) for key, m in (r.canary_users_by_documents or {}).get(
            attack, {}).items() if key.split(":", 1)[0] == str(length)),
                        key=lambda c: (c[0] == "all", int(c[0]) if c[0] != "all" else 0))
        for documents, m in cells:
            rows.append({**common, "documents": documents if documents in ("mixed", "all") else int(documents),
                         "members": m.members, "non_members": m.non_members, "auroc": m.auroc,
                         "auroc_ci95": m.auroc_ci95, "auroc_p_exact": m.auroc_p_exact})
    return [{k: row[k] for k in ROW_KEYS} for row in rows]
