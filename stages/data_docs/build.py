"""Great Expectations Data Docs for the data contracts, built into reports/data_docs/ by GX's own renderer.

The stages validate in an ephemeral GX context and keep aggregate results (gx_results.json, no row values).
Here each stored result becomes a GX ``ExpectationSuiteValidationResult`` again and is rendered with GX's
validation-results page renderer, one page per suite plus an index. The run time is fixed (the epoch), the run name
is the dataset, and GX's render-time stamp and random element ids are replaced by constants and counters, so
the pages hold no timestamp or path: the same results give the same bytes.
GX's page template loads its styles from a CDN; offline the pages render unstyled but complete.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

from ..shared.core.io import atomic_dir, read_json

RUN_TIME = "1970-01-01T00:00:00+00:00"  # not a timestamp: a constant, so outputs hash the same on any machine


def _result(r: dict) -> dict:
    """GX's result dict from our aggregates: counts and percentages, never the unexpected values themselves."""
    out = {k: r[k] for k in ("observed_value", "unexpected_count", "element_count") if r.get(k) is not None}
    if r.get("unexpected_count") is not None and r.get("element_count"):
        pct = 100.0 * r["unexpected_count"] / r["element_count"]
        out.update(unexpected_percent=pct, unexpected_percent_total=pct, unexpected_percent_nonmissing=pct,
                   missing_count=0, missing_percent=0.0, partial_unexpected_list=[])
    return out


def _validation_result(dataset: str, suite: str, rep: dict):
    from great_expectations.core import ExpectationSuiteValidationResult, ExpectationValidationResult
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    results = [ExpectationValidationResult(
        success=r["success"], expectation_config=ExpectationConfiguration(type=r["expectation"], kwargs=r["kwargs"]),
        result=_result(r)) for r in rep["results"]]
    good = sum(r.success for r in results)
    stats = {"evaluated_expectations": len(results), "successful_expectations": good,
             "unsuccessful_expectations": len(results) - good,
             "success_percent": 100.0 * good / len(results) if results else 100.0}
    return ExpectationSuiteValidationResult(
        success=rep["success"], results=results, suite_name=suite, statistics=stats,
        meta={"run_id": {"run_name": dataset, "run_time": RUN_TIME},
              "active_batch_definition": {"datasource_name": "preprocess", "data_connector_name": "",
                                          "data_asset_name": dataset, "batch_identifiers": {}}})


_STAMP = re.compile(r"\?d=\d{8}T[\d.]+Z")  # GX's cache-busting timestamp on its logo URL
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # GX's random element ids


def scrub(page: str) -> str:
    """Drop GX's render-time stamp and renumber its random element ids in order of appearance (same links)."""
    ids: dict[str, str] = {}
    page = _STAMP.sub("", page)
    return _UUID.sub(lambda m: ids.setdefault(m.group(0), f"n{len(ids)}"), page)


def results_of(processed: Path) -> dict[str, Path]:
    """dataset -> its gx_results.json, for every processed dataset folder under ``processed`` that has one, by name."""
    folders = sorted(p for p in processed.iterdir() if (p / "gx_results.json").is_file()) if processed.is_dir() else []
    return {p.name: p / "gx_results.json" for p in folders}


def build_data_docs(results: dict[str, Path], out: Path) -> list[dict]:
    """dataset -> its gx_results.json; writes ``out``/<dataset>__<suite>.html and ``out``/index.html atomically.
    Returns one row per suite (dataset, suite, success, rows, page)."""
    from great_expectations.render.renderer import ValidationResultsPageRenderer
    from great_expectations.render.view import DefaultJinjaPageView

    rows = []
    with atomic_dir(out) as tmp:
        for dataset, path in sorted(results.items()):
            for suite, rep in read_json(path).items():
                page = f"{dataset}__{suite}.html"
                doc = ValidationResultsPageRenderer().render(_validation_result(dataset, suite, rep))
                (tmp / page).write_text(scrub(DefaultJinjaPageView().render(doc)))
                rows.append({"dataset": dataset, "suite": suite, "success": rep["success"], "rows": rep["rows"],
                             "page": page})
        items = "".join(f'<tr><td>{html.escape(r["dataset"])}</td><td><a href="{r["page"]}">{html.escape(r["suite"])}'
                        f'</a></td><td>{r["rows"]}</td><td>{"passed" if r["success"] else "FAILED"}</td></tr>'
                        for r in rows)
        (tmp / "index.html").write_text(
            "<!doctype html><html><head><meta charset='utf-8'><title>Data Docs</title></head><body>"
            "<h1>Great Expectations Data Docs: data contracts</h1><p>One page per suite, rendered by Great "
            "Expectations from the results each preprocess stage recorded (aggregates only, no row values).</p>"
            "<table border=1 cellpadding=4><tr><th>dataset</th><th>suite</th><th>rows</th><th>result</th></tr>"
            f"{items}</table></body></html>\n")
    return rows
