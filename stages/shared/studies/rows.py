"""One instrument's measure on one pool of one run, as the report and the positive control compare them across runs:
an AUROC (``AurocRow``: text membership attacks, user inference, the blind baseline) or a value (``ValueRow``: VMR
minus the base model per arm; ``EiaRow``: embedding inversion's token F1 and its baseline), each with its interval
and counts."""
from __future__ import annotations

from ..core.records import record

#: the text membership attacks whose rows ``instrument_rows`` (stages/audit/schema.py) reads (each also scores users
#: through their rows)
TEXT_ATTACKS = ("loss", "ref_ratio", "zlib", "min_k", "min_k_pp", "ez_mia")


@record
class AurocRow:
    """An AUROC with its 95% bootstrap interval, or, where a side is too small for one, its exact permutation p."""

    instrument: str  # as the attack registry names it (``loss``, ``user_inference``, ``blind``)
    pool: str  # text | users | canary_users
    auroc: float | None
    auroc_ci95: list[float] | None
    auroc_p_exact: float | None
    members: int
    non_members: int

    @property
    def measure(self) -> float | None:
        return self.auroc

    def sees(self) -> bool:
        """Above chance: its 95% interval above 0.5, or, without one, its exact permutation p below 0.05."""
        if self.auroc_ci95:
            return self.auroc_ci95[0] > 0.5
        return self.auroc_p_exact is not None and self.auroc_p_exact < 0.05

    def covers_chance(self) -> bool:
        """Chance within its evidence: its interval covers 0.5 (without one, its exact one-sided p is at least
        0.05)."""
        if self.auroc_ci95:
            return self.auroc_ci95[0] <= 0.5 <= self.auroc_ci95[1]
        return self.auroc_p_exact is None or self.auroc_p_exact >= 0.05


@record
class ValueRow:
    """A measure that is not an AUROC, with its 95% interval where it has one (chance is 0)."""

    instrument: str  # vmr | air | eia
    pool: str  # trained | held_out (VMR's and AIR's arms) | test (embedding inversion's unseen texts)
    value: float | None
    ci95: list[float] | None
    members: int | None  # VMR: the arm's secrets
    non_members: int | None

    @property
    def measure(self) -> float | None:
        return self.value

    def sees(self) -> bool:
        """Above chance: its 95% interval above 0 (never without an interval)."""
        return self.ci95 is not None and self.ci95[0] > 0.0

    def covers_chance(self) -> bool:
        return self.ci95 is None or self.ci95[0] <= 0.0 <= self.ci95[1]


@record
class EiaRow(ValueRow):
    """Embedding inversion's token F1 on unseen test texts, beside its baseline: the same decoder on another text's
    embedding (None where the run recorded none)."""

    baseline: float | None


#: a row of any kind (a union of records reads as the first that fits: the one with more keys first)
InstrumentRow = AurocRow | EiaRow | ValueRow
