"""TOFU: 4000 QA rows about 200 fictitious authors; author = row // rows_per_author.

Accepts JSON Lines (the HF layout, named .json or .jsonl), a JSON array, a parquet file, or a
Hugging Face ``datasets`` export (a ``save_to_disk`` directory or a directory of parquet files).
The split is by author (App. B.3: the last 10% of authors are the test set), so no author has rows
on both sides; TOFU has no validation split, so utility is measured on the test authors. Fine-tuning
pairs: question -> answer (SFT puts the loss on the answer only). Its real secrets are author -> genre
(data/secrets/tofu.parquet); a run trained on an author's genre when it trained on any of the
author's rows.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.errors import DataError
from ..core.gx import Expectation as E
from ..core.gx import Suite
from ..core.params import check
from ..core.seeds import stream
from .spec import (
    DatasetSpec,
    Processed,
    register_dataset,
    require_path,
    row_count_suites,
    row_ranges,
    split_groups,
    split_rows,
)


@dataclass(frozen=True)
class TofuParams:
    path: str
    rows_per_author: int
    test_fraction: float
    #: contiguous = the last test_fraction of authors (App. B.3); random = a seeded author sample
    split: Literal["contiguous", "random"]
    seed: int
    rows: dict[str, tuple[int, ...]]

    def problems(self):
        return (check(self.rows_per_author > 0, "rows_per_author", "must be > 0", self.rows_per_author)
                + check(0 <= self.test_fraction < 1, "test_fraction", "must be in [0, 1)", self.test_fraction)
                + row_ranges(self.rows))


SCHEMA = pa.schema([
    pa.field("row", pa.int32(), nullable=False),
    pa.field("author", pa.int32(), nullable=False),
    pa.field("question", pa.string(), nullable=False),
    pa.field("answer", pa.string(), nullable=False),
])


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


def build(params: TofuParams) -> Processed:
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
        test = split_groups(list(range(n_authors)), 0.0, params.test_fraction,
                stream("datasets.split").int_seed(params.seed))["test"]
    splits = split_rows(rows, "author", {"train": set(range(n_authors)) - test, "test": test})
    stats = [("QA rows", len(rows)), ("authors", n_authors)] + [(f"final {s}", len(v)) for s, v in splits.items()]
    return Processed(SCHEMA, splits, stats)


def contract(processed: Processed, params: TofuParams) -> list[Suite]:
    import pandas as pd

    rows = [(s, r) for s, rs in processed.splits.items() for r in rs]
    authors = pd.DataFrame(sorted({(r["author"], s) for s, r in rows}), columns=["author", "split"])
    per_author = pd.DataFrame([(r["author"], r["row"], len(r["answer"].strip()), len(r["question"].strip()))
                               for _, r in rows], columns=["author", "row", "answer_len", "question_len"])
    counts = per_author.groupby("author").size().reset_index(name="rows")
    k = params.rows_per_author
    return [
        Suite("tofu_author_split", authors, [E("ExpectColumnValuesToBeUnique", {"column": "author"})]),
        Suite("tofu_rows", per_author, [
            E("ExpectColumnValuesToBeUnique", {"column": "row"}),
            E("ExpectColumnValuesToBeBetween", {"column": "answer_len", "min_value": 1}),
            E("ExpectColumnValuesToBeBetween", {"column": "question_len", "min_value": 1}),
        ]),
        Suite("tofu_rows_per_author", counts, [
            E("ExpectColumnValuesToBeBetween", {"column": "rows", "min_value": k, "max_value": k})]),
    ] + row_count_suites("tofu", processed.splits, params.rows)


def pairs(rows: list[dict]) -> list[tuple[str, str]]:
    """TOFU QA (App. B.3): question -> answer; SFT puts the loss on the answer only."""
    return [(f"Question: {r['question']}\nAnswer:", f" {r['answer']}") for r in rows]


def trained_secrets(trained_rows: list[dict], secrets: list[dict]) -> list[bool]:
    """An author's genre counts as trained when the run trained on any row of that author."""
    authors = {f"author:{r['author']}" for r in trained_rows}
    return [s["source"] in authors for s in secrets]


SPEC = register_dataset(DatasetSpec(
    name="tofu", params=TofuParams, schema=SCHEMA, build=build, contract=contract, pairs=pairs,
    splits=("train", "test"), eval_split="test", heldout_splits=("test",), auxiliary_split="train", secrets="tofu",
    trained_secrets=trained_secrets))
