"""Helpers shared by the dataset readers: input checks, regex tokens, and writing a Processed."""
from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from ..errors import DataError
from ..io import write_table
from . import schemas
from .registry import Processed

_TOKEN = re.compile(r"\w+|[^\w\s]")


def require_path(path: str | Path, what: str, key: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: {what} not found (set {key} in params.yaml)")
    return p


def count_tokens(text: str) -> int:
    """Word and punctuation pieces (tokenizer-free, so preprocessing does not depend on the model)."""
    return len(_TOKEN.findall(text))


def write_processed(out_dir: Path, processed: Processed) -> None:
    """``<split>.parquet`` per split, ``stats.parquet`` and each extra table, all schema-checked."""
    if not processed.splits.get("train"):
        raise DataError(f"{out_dir}: the train split is empty (too little input data, or filters too strict?)")
    for split, rows in processed.splits.items():
        write_table(pa.Table.from_pylist(rows, schema=processed.schema), out_dir / f"{split}.parquet", processed.schema)
    for name, (schema, rows) in processed.extra.items():
        write_table(pa.Table.from_pylist(rows, schema=schema), out_dir / f"{name}.parquet", schema)
    stats = [{"step": s, "count": int(c)} for s, c in processed.stats]
    write_table(pa.Table.from_pylist(stats, schema=schemas.STATS), out_dir / "stats.parquet", schemas.STATS)


def split_rows(rows: list[dict], key: str, assign: dict[str, set]) -> dict[str, list[dict]]:
    where = {g: s for s, groups in assign.items() for g in groups}
    out: dict[str, list[dict]] = {s: [] for s in assign}
    for r in rows:
        out[where[r[key]]].append(r)
    return out
