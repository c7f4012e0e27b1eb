"""How a test's figures read in the report: a simulated figure with its Monte Carlo error (``mc``), a bound's seed
status (``status_words``), the DP optimizer's label."""
from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from ..audit.schema import AuditUser, Pooled, Primary, SeedStatus, SingleRun
from ..shared.bounds.keys import IDEAL_SUMMARIES, mc_interval_key, mcse_key
from ..shared.core.formatting import fmt

#: the DP optimizer's label for each name a record holds (a run record's privacy: "DP-adamw"; a study row: "adamw")
OPTIMIZERS = {key: f"DP-{label}" for name, label in (("sgd", "SGD"), ("adam", "Adam"), ("adamw", "AdamW"))
              for key in (name, f"DP-{name}")}

@cache
def _fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _stat(test: Any, key: str) -> Any:
    """A simulated figure of a test, by the key ``mc`` composes (ideal_eps_lb_95_median and its _mc95/_mcse,
    ideal_percentile, ideal_trials): a record's field, else one of its ``bounds``; a study row (a dict, study.json)
    by its key. None where it has none."""
    if isinstance(test, dict):
        return test.get(key)
    if key in _fields(type(test)):
        return getattr(test, key)
    bounds = getattr(test, "bounds", None)  # a record with bounds per confidence (not PrivacyRecord)
    return None if bounds is None else bounds.get(key)


def optimizer_label(optimizer: str | None) -> str:
    """The DP optimizer as a record names it ("DP-adamw" or "adamw" -> "DP-AdamW"; an unknown name as recorded)."""
    name = str(optimizer or "?")
    return OPTIMIZERS.get(name, name)


def mc(p: Any, key: str, nd: int = 3, trials=None) -> str:
    """A simulated figure ``p[key]`` with its Monte Carlo error: a quantile with its order-statistic interval
    ("1.921, Monte Carlo interval 1.853–1.921": a bound moves in steps, and a median on a step's edge has a small
    standard error but may be either step), a percentile with its binomial standard error ("43.9 ± 0.3"); one
    recorded without either (an older audit) says so, with its trial count where known. ``p``: a test's record
    (Primary, AuditUser, Pooled, SingleRun, Planned) or a study row."""
    value, interval, se = _stat(p, key), _stat(p, mc_interval_key(key)), _stat(p, mcse_key(key))
    if value is None:
        return "–"
    if interval is not None:
        return f"{fmt(value, nd)}, Monte Carlo interval {fmt(interval[0], nd)}–{fmt(interval[1], nd)}"
    if key.endswith(tuple(f"_{s}" for s in IDEAL_SUMMARIES)):  # a quantile recorded without its interval
        return f"{fmt(value, nd)} (Monte Carlo interval not recorded)"
    if se is not None:
        return f"{fmt(value, nd)} ± {fmt(se, nd)}"
    n = trials if trials is not None else _stat(p, "ideal_trials")
    return f"{fmt(value, nd)} (Monte Carlo error not recorded" + (f", {n} trials)" if n else ")")


def is_confirmation(test: Primary | AuditUser | Pooled | SingleRun) -> bool:
    """The bound's seed set is a confirmation in the seed ledger (the audit recorded its status)."""
    return test.seed_status is SeedStatus.CONFIRMATION


def status_words(test: Primary | AuditUser | Pooled | SingleRun, short: bool = False) -> str:
    """How a bound's seed status reads (the seed ledger's, as the audit recorded it): a confirmation names its
    seeds as the set's first recorded run under this design; anything else is a development look, never evidence.
    ``short``: as a headline card's note (read at a glance; the audit section states the rule)."""
    seeds = ", ".join(map(str, test.seeds)) or "?"
    if is_confirmation(test):
        return f"confirmation set, seeds {seeds} (seed ledger)" if short else (
            f"confirmation: seeds {seeds}, committed before their first recorded run, which is this design "
            "(seed ledger)")
    return f"development look, seeds {seeds} (seed ledger): not evidence" if short else (
        f"development look: seeds {seeds} were run under another design or used to choose one (seed ledger); "
        "not evidence")
