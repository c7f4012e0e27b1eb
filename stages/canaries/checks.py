"""The canaries' Great Expectations suite: unique ids, the kind, a fair member share, the configured lengths.
It looks at lengths and flags only, never at the token ids."""

from __future__ import annotations

from ..shared.core.gx import Expectation as E
from ..shared.core.gx import Suite


def member_share_band(m: int, member_prob: float, alpha: float) -> tuple[float, float]:
    """Acceptance band of the share of members among m seeded coins of bias ``member_prob``: a two-sided binomial
    test that refuses a fair draw with probability at most ``alpha`` (m = 1000, 0.5, 1e-6: [0.423, 0.577], which
    flags a coin of bias 0.6 w.p. 0.93 and one that makes every canary a member w.p. 1)."""
    from scipy.stats import binom

    lo, hi = binom.ppf(alpha / 2, m, member_prob), binom.isf(alpha / 2, m, member_prob)
    return float(lo) / m, float(hi) / m


def canary_suite(kind: str, rows: list[dict], params) -> Suite:
    import pandas as pd

    frame = pd.DataFrame({
        "canary_id": [r["canary_id"] for r in rows],
        "kind": [r["kind"] for r in rows],
        "member": [float(r["member"]) for r in rows],
        "secret_length": [len(r["secret_ids"]) for r in rows],
        "prefix_length": [len(r["prefix_ids"]) for r in rows],
    })
    lo, hi = member_share_band(len(rows), params.member_prob, params.checks.member_share_alpha)
    return Suite(f"canaries_{kind}", frame, [
        E("ExpectColumnValuesToBeUnique", {"column": "canary_id"}),
        E("ExpectColumnValuesToBeInSet", {"column": "kind", "value_set": [kind]}),
        E("ExpectColumnMeanToBeBetween", {"column": "member", "min_value": lo, "max_value": hi}),
        E("ExpectColumnValuesToBeBetween", {"column": "secret_length", "min_value": max(1, params.secret_length),
                                            "max_value": params.secret_length}),
        E("ExpectColumnValuesToBeBetween", {"column": "prefix_length", "min_value": params.prefix_length,
                                            "max_value": params.prefix_length}),
    ])
