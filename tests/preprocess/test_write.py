"""The preprocess stage's output: one schema-checked parquet per split, the step counts and extra tables."""
import pytest

from stages.preprocess.write import write_processed
from stages.shared.core.errors import DataError
from stages.shared.core.io import read_table
from stages.shared.datasets import CANDIDATES, STATS, Processed, get_dataset


def _processed(train):
    schema = get_dataset("tofu").schema
    rows = [{"row": i, "author": i // 2, "question": f"q{i}", "answer": f"a{i}"} for i in range(4)]
    return Processed(schema, {"train": rows[:2] if train else [], "test": rows[2:]}, [("QA rows", 4)],
                     {"candidates": (CANDIDATES, [{"value": "v", "kind": "sequence", "count": 2}])})


def test_splits_stats_and_extra_tables_are_written(tmp_path):
    write_processed(tmp_path, _processed(train=True))
    assert [r["row"] for r in read_table(tmp_path / "test.parquet", get_dataset("tofu").schema).to_pylist()] == [2, 3]
    assert read_table(tmp_path / "stats.parquet", STATS).to_pylist() == [{"step": "QA rows", "count": 4}]
    assert read_table(tmp_path / "candidates.parquet", CANDIDATES).num_rows == 1


def test_an_empty_train_split_is_refused(tmp_path):
    with pytest.raises(DataError, match="the train split is empty"):
        write_processed(tmp_path, _processed(train=False))
