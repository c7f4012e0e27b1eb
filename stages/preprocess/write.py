"""Write a dataset's processed output: one parquet per split, stats.parquet, each extra table."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..shared.core.errors import DataError
from ..shared.core.io import write_table
from ..shared.datasets import STATS, Processed


def write_processed(out_dir: Path, processed: Processed) -> None:
    """``<split>.parquet`` per split, ``stats.parquet`` and each extra table, all schema-checked."""
    if not processed.splits.get("train"):
        raise DataError(f"{out_dir}: the train split is empty (too little input data, or filters too strict?)")
    for split, rows in processed.splits.items():
        write_table(pa.Table.from_pylist(rows, schema=processed.schema), out_dir / f"{split}.parquet", processed.schema)
    for name, (schema, rows) in processed.extra.items():
        write_table(pa.Table.from_pylist(rows, schema=schema), out_dir / f"{name}.parquet", schema)
    stats = [{"step": s, "count": int(c)} for s, c in processed.stats]
    write_table(pa.Table.from_pylist(stats, schema=STATS), out_dir / "stats.parquet", STATS)
