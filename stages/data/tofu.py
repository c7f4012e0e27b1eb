"""TOFU: 4000 QA rows about 200 fictitious authors; author = row // rows_per_author.

Accepts JSON Lines (the HF layout, named .json or .jsonl), a JSON array, a parquet file, or a
Hugging Face ``datasets`` export (a ``save_to_disk`` directory or a directory of parquet files).
The split is by author (App. B.3: the last 10% of authors are the test set), so no author has rows
on both sides. The SFT format (question -> answer, loss on the answer only) is built by finetune.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from ..errors import DataError
from . import schemas
from .common import require_path, split_rows
from .registry import Processed, register_dataset
from .splits import split_groups


def read_rows(path: Path) -> list[dict]:
    if path.is_dir() and any((path / f).is_file() for f in ("dataset_info.json", "state.json", "dataset_dict.json")):
        return _read_hf_saved(path)
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
    return _check_rows(path, rows)


def _read_hf_saved(path: Path) -> list[dict]:
    """A ``datasets`` save_to_disk export (a Dataset, or a DatasetDict: its train split or first one)."""
    from datasets import DatasetDict, load_from_disk

    try:
        ds = load_from_disk(str(path))
    except Exception as exc:  # datasets raises several types for a corrupt export
        raise DataError(f"{path}: not a readable Hugging Face datasets export ({exc})") from None
    if isinstance(ds, DatasetDict):
        ds = ds["train"] if "train" in ds else ds[next(iter(ds))]
    return _check_rows(path, ds.to_list())


def _check_rows(path: Path, rows: list) -> list[dict]:
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not isinstance(r.get("question"), str) or not isinstance(r.get("answer"), str):
            raise DataError(f"{path}: row {i} lacks string fields 'question' and 'answer'")
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


@register_dataset("tofu")
def build(params) -> Processed:
    path = require_path(params.path, "TOFU file", "preprocess.datasets.tofu.path")
    raw = read_rows(path)
    k = params.rows_per_author
    if len(raw) % k:
        raise DataError(f"{path}: {len(raw)} rows is not a multiple of rows_per_author={k}")
    rows = [{"row": i, "author": i // k, "question": r["question"], "answer": r["answer"]} for i, r in enumerate(raw)]
    n_authors = len(rows) // k
    n_test = int(round(n_authors * params.test_fraction))
    if params.split == "contiguous":  # App. B.3: authors [0, 180) train, [180, 200) test
        test = set(range(n_authors - n_test, n_authors))
    else:
        test = split_groups(list(range(n_authors)), 0.0, params.test_fraction, params.seed)["test"]
    splits = split_rows(rows, "author", {"train": set(range(n_authors)) - test, "test": test})
    stats = [("QA rows", len(rows)), ("authors", n_authors)] + [(f"final {s}", len(v)) for s, v in splits.items()]
    return Processed(schemas.TOFU, splits, stats)
