"""TOFU: 4000 QA rows about 200 fictitious authors; author = row // rows_per_author.

Accepts JSON Lines (the HF layout, named .json or .jsonl), a JSON array, or a parquet export.
The split is by author (no author has rows on both sides).
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from ..errors import DataError
from . import schemas
from .common import require_path, write_splits
from .registry import register_dataset
from .splits import split_groups


def read_rows(path: Path) -> list[dict]:
    if path.is_dir() or path.suffix == ".parquet":
        files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
        if not files:
            raise DataError(f"{path}: no parquet files in this directory")
        rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    else:
        text = path.read_text(encoding="utf-8")
        if text.lstrip().startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        else:
            rows = []
            for lineno, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: not a JSON line ({exc.msg})") from None
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not isinstance(r.get("question"), str) or not isinstance(r.get("answer"), str):
            raise DataError(f"{path}: row {i} lacks string fields 'question' and 'answer'")
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


@register_dataset("tofu", splits=("train", "test"))
def build(params, out_dir: Path) -> list[tuple[str, int]]:
    path = require_path(params.path, "TOFU file", "preprocess.datasets.tofu.path")
    raw = read_rows(path)
    k = params.rows_per_author
    if len(raw) % k:
        raise DataError(f"{path}: {len(raw)} rows is not a multiple of rows_per_author={k}")
    rows = [
        {"row": i, "author": i // k, "question": r["question"], "answer": r["answer"]}
        for i, r in enumerate(raw)
    ]
    stats = [("QA rows", len(rows)), ("authors", len(rows) // k)]
    assign = split_groups([r["author"] for r in rows], 0.0, params.test_fraction, params.seed)
    split_of = lambda r: "test" if r["author"] in assign["test"] else "train"  # noqa: E731
    return write_splits(out_dir, rows, schemas.TOFU, split_of, stats, splits=("train", "test"))
