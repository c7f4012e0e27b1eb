"""Params of the audit design study (the top-level ``study`` section): read by flows/audit_study.py and
flows/pooled_audit.py, never by a DVC stage (the audit stage's closure holds none of it)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...shared.core.params import check, section_of


@dataclass(frozen=True)
class StudyParams:
    """The audit design study (flows/audit_study.py -> reports/audit_study/): the auditor's choices (score x
    guessing rule, evaluated on every trained model) x the default DP run's (q, T) at the same compute, on
    development seeds; the chosen design is then committed (audit.primary, runs.<run>) and confirmed on fresh seeds.
    The top-level ``study`` section: read by the flow, not by the audit stage."""

    #: the DP run studied and the canary kind its designs score
    run: str
    kind: str
    #: membership scores compared (each a canary attack) and guessing rules [k_pos, k_neg]
    scores: tuple[str, ...]
    rules: tuple[tuple[int, int], ...]
    #: name -> {batch_size, steps}: the run's (q, T) at the same expected exposures q*T
    profiles: dict[str, dict[str, int]]
    #: a seed s sets canaries.seed and finetune.seed (canary draw, membership coins, text sample, training noise)
    development_seeds: tuple[int, ...]
    confirmation_seeds: tuple[int, ...]
    #: the attacks each study experiment runs (the scores above; nothing else is read)
    attacks: tuple[str, ...]
    #: recipe sensitivity at the committed profile (descriptive, one seed): name -> overrides of runs.<run>
    recipes: dict[str, Any]
    recipe_seed: int
    out_dir: str

    def problems(self):
        return (check(len(self.scores) > 0, "scores", "needs at least one score", self.scores)
                + check(all(len(r) == 2 and r[0] >= 0 and r[1] >= 0 and sum(r) > 0 for r in self.rules), "rules",
                        "each rule is [k_pos, k_neg] with k_pos + k_neg > 0", self.rules)
                + check(all(set(p) == {"batch_size", "steps"} for p in self.profiles.values()), "profiles",
                        "each profile sets batch_size and steps", self.profiles)
                + check(not set(self.development_seeds) & set(self.confirmation_seeds), "confirmation_seeds",
                        "must not reuse a development seed", self.confirmation_seeds)
                + check(set(self.scores) <= set(self.attacks), "attacks", "must include every score",
                        self.attacks))

    def relations(self, raw: dict) -> list[tuple[str, str]]:
        """Every seed the study used is a development seed (``audit.seeds.development``)."""
        used = set(self.development_seeds) | set(self.confirmation_seeds) | {self.recipe_seed}
        unlisted = sorted(used - set(section_of(raw, "audit.seeds.development") or ()))
        return [("audit.seeds.development", f"must list every seed the design study used (missing {unlisted})")] \
            if unlisted else []
