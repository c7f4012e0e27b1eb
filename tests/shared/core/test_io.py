"""Atomic outputs and schema-checked parquet."""
import pyarrow as pa
import pytest

from stages.shared.core.errors import DataError
from stages.shared.core.io import atomic_dir, atomic_file, read_table, write_table

SCHEMA = pa.schema([pa.field("a", pa.int64(), nullable=False)])


def test_a_failed_write_leaves_nothing_not_even_new_folders(tmp_path):
    target = tmp_path / "new" / "deeper" / "out"
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as tmp:
            (tmp / "partial.txt").write_text("x")
            raise RuntimeError("stage failed")
    with pytest.raises(RuntimeError):
        with atomic_file(tmp_path / "other" / "f.json") as tmp:
            tmp.write_text("{")
            raise RuntimeError("stage failed")
    assert list(tmp_path.iterdir()) == []


def test_a_successful_write_replaces_the_old_output(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.txt").write_text("old")
    with atomic_dir(tmp_path / "out") as tmp:
        (tmp / "fresh.txt").write_text("new")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["fresh.txt"]


def test_parquet_schema_mismatch_names_file_and_field(tmp_path):
    write_table(pa.table({"a": [1, 2]}), tmp_path / "t.parquet", SCHEMA)
    other = pa.schema([pa.field("b", pa.int64(), nullable=False)])
    with pytest.raises(DataError, match=r"t.parquet: schema mismatch \(missing b; unexpected a\)"):
        read_table(tmp_path / "t.parquet", other)
    with pytest.raises(DataError, match=r"missing.parquet: not found \(run the canaries stage first\)"):
        read_table(tmp_path / "missing.parquet", SCHEMA, "canaries")
