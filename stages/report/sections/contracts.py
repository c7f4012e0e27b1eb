"""Data contracts: every processed dataset's Great Expectations results, and the GX Data Docs."""
from __future__ import annotations

from ...shared.core.formatting import Table
from ...shared.core.io import read_json
from ..inputs import Inputs, processed_dirs
from ..render import Section


def contracts_section(inp: Inputs) -> Section:
    ct = Table(["dataset", "suite", "expectation", "column", "observed", "ok"])
    found = {d.name: d / "gx_results.json" for d in processed_dirs(inp, "gx_results.json")}
    suites = 0  # one Data Docs page each
    for name, path in found.items():
        for suite, rep in read_json(path).items():
            suites += 1
            for r in rep["results"]:
                obs = r.get("observed_value")
                if obs is None and r.get("unexpected_count") is not None:
                    obs = f"{r['unexpected_count']} of {r['element_count']} unexpected"
                ct.rows.append([name, suite, r["expectation"], r["kwargs"].get("column", ""), obs, r["success"]])
    return Section("Data contracts (Great Expectations)", tables=[ct], paragraphs=[
        "Every processed dataset is checked against its pyarrow schema and a Great Expectations suite before "
        "it is written; a violation fails its stage. Observed values are aggregates (no row contents). "
        f"GX Data Docs: `{(inp.out_dir / 'data_docs' / 'index.html').as_posix()}` ({suites} suite pages, rendered "
        "by the data_docs stage)."])
