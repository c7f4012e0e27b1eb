"""Great Expectations suites that run inside stages at their boundaries and fail them with a readable message.

A suite is a small pandas frame derived from a stage's output (ids, lengths, hashes, flags: never raw
text) and the expectations it must meet. Results are returned as plain dicts (success, expectation,
column, observed) and written by the stage next to its data as a DVC output. Only aggregate
observations are kept: no row values, so no secret or canary plaintext ends up in a results file or
a log. GX is imported lazily (its import costs seconds) and runs in one ephemeral context per process
with analytics and progress bars off.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import DataError


@dataclass(frozen=True)
class Expectation:
    type: str  # GX class name, e.g. "ExpectColumnValuesToBeUnique"
    kwargs: dict


@dataclass
class Suite:
    name: str
    frame: Any  # pandas.DataFrame
    expectations: list[Expectation]


_CTX: list = []


def _context():
    """One ephemeral GX context per process, quiet (no progress bars, no analytics)."""
    if not _CTX:
        import logging

        logging.getLogger("great_expectations").setLevel(logging.WARNING)
        import great_expectations as gx
        from great_expectations.data_context.types.base import (
            DataContextConfig,
            InMemoryStoreBackendDefaults,
            ProgressBarsConfig,
        )

        config = DataContextConfig(store_backend_defaults=InMemoryStoreBackendDefaults(), analytics_enabled=False,
                                   progress_bars=ProgressBarsConfig(globally=False))
        _CTX.append(gx.get_context(mode="ephemeral", project_config=config))
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
            what += (f" observed {r['observed_value']:.4g}" if isinstance(r["observed_value"], float)
                     else f" observed {r['observed_value']}")
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


def check_suites(suites: list[Suite], where: str) -> dict[str, dict[str, Any]]:
    """Run every suite; raise a one-line DataError on the first failing one. Returns name -> report."""
    return {s.name: check(s.name, s.frame, s.expectations, where) for s in suites}
