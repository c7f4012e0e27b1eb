"""Helpers shared by the dataset readers: input checks and writing split tables + stats."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import pyarrow as pa

from ..errors import DataError
from ..io import write_table
from . import schemas


def require_path(path: str | Path, what: str, key: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: {what} not found (set {key} in params.yaml)")
    return p


def write_splits(
    out_dir: Path,
    rows: list[dict],
    schema: pa.Schema,
    split_of: Callable[[dict], str],
    stats: list[tuple[str, int]],
    splits: Iterable[str] = ("train", "valid", "test"),
) -> list[tuple[str, int]]:
    """Write ``<split>.parquet`` for every split and ``stats.parquet``; return the stats rows."""
    by_split: dict[str, list[dict]] = {s: [] for s in splits}
    for r in rows:
        by_split[split_of(r)].append(r)
    for split, items in by_split.items():
        table = pa.Table.from_pylist(items, schema=schema)
        write_table(table, out_dir / f"{split}.parquet", schema)
        stats.append((f"split: {split}", len(items)))
    if not by_split.get("train"):
        raise DataError(f"{out_dir}: the train split is empty (too little input data?)")
    write_table(
        pa.Table.from_pylist([{"step": s, "count": int(c)} for s, c in stats], schema=schemas.STATS),
        out_dir / "stats.parquet",
        schemas.STATS,
    )
    return stats
