"""Data: counts after each preprocessing step, per dataset."""
from __future__ import annotations

from ...shared.core import lineage as lin
from ...shared.core.formatting import Table
from ...shared.core.io import read_table
from ...shared.datasets import STATS
from ..inputs import Inputs, processed_dirs
from ..render import Section


def data_section(inp: Inputs) -> Section:
    data = Section("Data", paragraphs=[
        "Counts after each preprocessing step, per dataset (the source path is the one dvc.lock recorded; "
        "`data/raw/...` = the small real samples vendored in the repository, not the full corpora)."])
    for ds_dir in processed_dirs(inp, "stats.parquet"):
        st = read_table(ds_dir / "stats.parquet", STATS).to_pylist()
        rec = lin.stage_record(inp.lock, f"preprocess@{ds_dir.name}") or {"params": {}}
        src = (rec["params"].get(f"preprocess.datasets.{ds_dir.name}") or {}).get("path", "?")
        data.tables.append(Table([f"{ds_dir.name} ({src}): step", "count"], [[s["step"], s["count"]] for s in st]))
    return data
