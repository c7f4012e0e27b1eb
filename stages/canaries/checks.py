"""The canaries' Great Expectations suite: unique ids, the kind, a fair member share, the configured lengths.
It looks at lengths and flags only, never at the token ids."""
from __future__ import annotations

from ..core.gx import Expectation as E
from ..core.gx import Suite


def canary_suite(kind: str, rows: list[dict], params) -> Suite:
    import pandas as pd

    frame = pd.DataFrame({
        "canary_id": [r["canary_id"] for r in rows],
        "kind": [r["kind"] for r in rows],
        "member": [float(r["member"]) for r in rows],
        "secret_length": [len(r["secret_ids"]) for r in rows],
        "prefix_length": [len(r["prefix_ids"]) for r in rows],
    })
    return Suite(f"canaries_{kind}", frame, [
        E("ExpectColumnValuesToBeUnique", {"column": "canary_id"}),
        E("ExpectColumnValuesToBeInSet", {"column": "kind", "value_set": [kind]}),
        E("ExpectColumnMeanToBeBetween", {"column": "member", "min_value": params.checks.member_share_min,
                                          "max_value": params.checks.member_share_max}),
        E("ExpectColumnValuesToBeBetween", {"column": "secret_length", "min_value": max(1, params.secret_length),
                                            "max_value": params.secret_length}),
        E("ExpectColumnValuesToBeBetween", {"column": "prefix_length", "min_value": params.prefix_length,
                                            "max_value": params.prefix_length}),
    ])
