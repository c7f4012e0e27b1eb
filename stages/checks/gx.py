"""Great Expectations suites that run inside stages and fail them with a readable message.

Results are returned as plain dicts (success, expectation, column, observed) and written by the
stage next to its data as a DVC output. Only aggregate observations are kept: no row values, so
no secret or canary plaintext ends up in a results file or a log.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import DataError

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@dataclass(frozen=True)
class Expectation:
    type: str  # GX class name, e.g. "ExpectColumnValuesToBeUnique"
    kwargs: dict


_CTX: list = []


def _context():
    """One ephemeral GX context per process, quiet (no progress bars, no analytics)."""
    if not _CTX:
        import logging

        logging.getLogger("great_expectations").setLevel(logging.WARNING)
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        ctx = gx.get_context(mode="ephemeral")
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        _CTX.append(ctx)
    return _CTX[0]


def run_suite(name: str, df, expectations: list[Expectation]) -> dict[str, Any]:
    """Validate a pandas DataFrame against a suite in the process's ephemeral GX context."""
    import great_expectations as gx

    ctx = _context()
    uid = f"{name}_{len(ctx.suites.all())}"
    batch_def = ctx.data_sources.add_pandas(uid).add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
    suite = gx.ExpectationSuite(name=uid)
    for e in expectations:
        suite.add_expectation(getattr(gx.expectations, e.type)(**e.kwargs))
    suite = ctx.suites.add(suite)
    res = batch_def.get_batch(batch_parameters={"dataframe": df}).validate(suite, result_format="SUMMARY")
    results = []
    for r in res.results:
        cfg = r.expectation_config
        obs = r.result or {}
        results.append({
            "expectation": cfg.type,
            "kwargs": {k: v for k, v in cfg.kwargs.items() if k not in ("batch_id",)},
            "success": bool(r.success),
            "observed_value": obs.get("observed_value"),
            "unexpected_count": obs.get("unexpected_count"),
            "element_count": obs.get("element_count"),
        })
    return {"suite": name, "success": bool(res.success), "rows": int(len(df)), "results": results}


def describe_failures(report: dict) -> str:
    parts = []
    for r in report["results"]:
        if r["success"]:
            continue
        kw = {k: v for k, v in r["kwargs"].items() if k != "column"}
        col = r["kwargs"].get("column", "")
        what = f"{r['expectation']}({col}{', ' if col and kw else ''}{', '.join(f'{k}={v}' for k, v in kw.items())})"
        if r["observed_value"] is not None:
            what += f" observed {r['observed_value']:.4g}" if isinstance(r["observed_value"], float) else f" observed {r['observed_value']}"
        if r["unexpected_count"]:
            what += f", {r['unexpected_count']} of {r['element_count']} rows unexpected"
        parts.append(what)
    return "; ".join(parts)


def check(name: str, df, expectations: list[Expectation], where: str) -> dict[str, Any]:
    """Run the suite; raise a one-line DataError naming ``where`` and the failed expectations."""
    report = run_suite(name, df, expectations)
    if not report["success"]:
        raise DataError(f"{where}: GX suite {name!r} failed: {describe_failures(report)}")
    return report


# ----------------------------------------------------------------------------- suites
def canary_suite(kinds: list[str], member_min: float, member_max: float, prefix_length: int,
                 secret_length: int) -> list[Expectation]:
    E = Expectation
    return [
        E("ExpectColumnValuesToBeUnique", {"column": "canary_id"}),
        E("ExpectColumnValuesToBeInSet", {"column": "kind", "value_set": list(kinds)}),
        E("ExpectColumnMeanToBeBetween", {"column": "member", "min_value": member_min, "max_value": member_max}),
        E("ExpectColumnValuesToBeBetween", {"column": "secret_length", "min_value": max(1, secret_length), "max_value": secret_length}),
        E("ExpectColumnValuesToBeBetween", {"column": "prefix_length", "min_value": prefix_length, "max_value": prefix_length}),
    ]


def canary_frame(rows: list[dict]):
    """The columns the canary suite looks at (lengths and flags, never the token ids)."""
    import pandas as pd

    return pd.DataFrame({
        "canary_id": [r["canary_id"] for r in rows],
        "kind": [r["kind"] for r in rows],
        "member": [float(r["member"]) for r in rows],
        "secret_length": [len(r["secret_ids"]) for r in rows],
        "prefix_length": [len(r["prefix_ids"]) for r in rows],
    })
