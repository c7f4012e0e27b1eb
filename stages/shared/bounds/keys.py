"""The keys of the one-run bounds and their ideal (``BoundKeys``: built in this one place, never parsed back but by
``confidence_of``), the bounds at one confidence (``Bounds``) and the guessing rule's counts (``clip_guesses``): shared
by the audit stage's metrics, the variance stage, the report and the tools."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


def confidence_tag(confidence: float) -> str:
    """0.95 -> "95", 0.999 -> "999": the suffix of the metrics keys of a confidence (eps_lb_95, gdp_eps_lb_95), its
    percentage without the decimal point. Keys are built only here (``BoundKeys``), never parsed back."""
    if not 0.1 <= confidence < 1:
        raise ValueError(f"confidence {confidence!r}: a bound's confidence must be in [0.1, 1)")
    return f"{round(confidence * 100, 6):g}".replace(".", "")


#: what a one-run test records per confidence: Steinke et al. 2023's assumption-free bound (eps_lb); under an assumed
#: Gaussian trade-off curve (gdp_mu_lb, gdp_eps_lb); under the accountant's own curve (curve_sigma_lb, curve_eps_lb);
#: what r guesses, all right, could show at most (max_provable_eps_lb)
BOUND_STATS = ("eps_lb", "gdp_mu_lb", "gdp_eps_lb", "curve_eps_lb", "curve_sigma_lb", "max_provable_eps_lb")
#: summaries of simulated (ideal) bounds; each also has its Monte Carlo error (``mcse_key``)
IDEAL_SUMMARIES = ("median", "p10", "p90")


def mcse_key(key: str) -> str:
    """The key of a simulated figure's Monte Carlo standard error: ideal_eps_lb_95_median -> ..._median_mcse."""
    return f"{key}_mcse"


def mc_interval_key(key: str) -> str:
    """The key of a simulated quantile's Monte Carlo interval [low, high] (order statistics, ~95 %): the way to state
    the error of a quantile of a bound that moves in steps (one count more or fewer), where a standard error misleads:
    ideal_eps_lb_95_median -> ..._median_mc95."""
    return f"{key}_mc95"


@dataclass(frozen=True)
class BoundKeys:
    """The metrics (and headline) keys of everything recorded at one confidence: the one place such a key is built.

    metrics.json keeps them flat (``eps_lb_95``, ``ideal_gdp_eps_lb_99_p10``...) so ``dvc metrics diff`` and every
    older experiment read them; code reaches them only through this record, never by formatting or splitting a
    key."""

    confidence: float

    @property
    def tag(self) -> str:
        return confidence_tag(self.confidence)

    def stat(self, name: str) -> str:
        """``name`` of BOUND_STATS at this confidence: stat("gdp_eps_lb") -> gdp_eps_lb_95."""
        if name not in BOUND_STATS:
            raise KeyError(f"{name!r} is not a bound statistic ({', '.join(BOUND_STATS)})")
        return f"{name}_{self.tag}"

    @property
    def eps_lb(self) -> str:
        return self.stat("eps_lb")

    @property
    def gdp_eps_lb(self) -> str:
        return self.stat("gdp_eps_lb")

    def ideal(self, name: str = "eps_lb", summary: str = "median") -> str:
        """A summary of the ideal audit's simulated bounds: ideal("gdp_eps_lb", "p10") -> ideal_gdp_eps_lb_95_p10."""
        if summary not in IDEAL_SUMMARIES:
            raise KeyError(f"{summary!r} is not an ideal summary ({', '.join(IDEAL_SUMMARIES)})")
        return f"ideal_{self.stat(name)}_{summary}"

    def headline(self, what: str) -> str:
        """A headline.json key: headline("audit") -> audit_eps_lb_95, headline("audit_gdp") -> audit_gdp_eps_lb_95."""
        return f"{what}_{self.eps_lb}"

    @property
    def label(self) -> str:
        """The column label of the assumption-free bound: ε̂95."""
        return "ε̂" + self.tag


def ideal_median_key(key: str) -> str:
    """The ideal audit's median of a recorded bound or count key: eps_lb_95 -> ideal_eps_lb_95_median (the variance
    study's measures name such keys in params)."""
    return f"ideal_{key}_median"


def confidence_key(confidence: float, prefix: str = "") -> str:
    """The key of the one-run bound at ``confidence``: eps_lb_95; with ``prefix`` e.g. gdp_eps_lb_95."""
    return BoundKeys(confidence).stat(f"{prefix}eps_lb")


_BOUND_KEY = re.compile(r"(?:^|\.)(?P<prefix>[a-z_]*?)eps_lb_(?P<tag>[1-9][0-9]*)$")


def confidence_of(key: str, prefix: str = "") -> float | None:
    """The confidence a bound key names (its last dotted part): "eps_lb_95" -> 0.95, "audit_primary.eps_lb_999" ->
    0.999; None when the key is no bound with that ``prefix``. The inverse of ``confidence_key``, for the one reader
    that has keys and no record: ``dvc exp show``'s scalars of an experiment (stages/tools/studies/compare.py)."""
    m = _BOUND_KEY.search(key)
    if m is None or m["prefix"] != prefix:
        return None
    confidence = float(f"0.{m['tag']}")  # the tag is a percentage in [10, 100) without its point
    return confidence if confidence_tag(confidence) == m["tag"] else None


@dataclass(frozen=True)
class Bounds:
    """A one-run test's bounds at one confidence: the assumption-free one (Steinke et al. 2023) and, where computed,
    those under an assumed Gaussian trade-off curve. Read and written as the flat keys of ``BoundKeys``."""

    confidence: float
    eps_lb: float
    gdp_mu_lb: float | None = None
    gdp_eps_lb: float | None = None

    def to_metrics(self, gdp: bool = True) -> dict[str, float | None]:
        k = BoundKeys(self.confidence)
        out = {k.eps_lb: self.eps_lb}
        if gdp:
            out.update({k.stat("gdp_mu_lb"): self.gdp_mu_lb, k.gdp_eps_lb: self.gdp_eps_lb})
        return out

    @classmethod
    def from_metrics(cls, test: dict[str, Any], confidence: float) -> "Bounds":
        k = BoundKeys(confidence)
        return cls(confidence, test[k.eps_lb], test.get(k.stat("gdp_mu_lb")), test.get(k.gdp_eps_lb))


def clip_guesses(k_pos: int, k_neg: int, m: int) -> tuple[int, int]:
    """The (k_pos, k_neg) a one-run test actually makes on m canaries: "in" guesses first, "out" guesses from what
    is left. The only definition of the rule: the audit's tests record these counts, and readers match them."""
    k_pos = min(k_pos, m)
    return k_pos, min(k_neg, m - k_pos)
