"""Atomic outputs and schema-checked parquet.

Every artifact is written to a temporary sibling and renamed into place, so a failed stage leaves
no partial output behind. Parquet tables are checked against their pyarrow schema on write and on
read; a mismatch is a one-line DataError naming the file and the field.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DataError


def file_digest(path: str | Path, algorithm: str = "md5") -> str:
    """Hex digest of a file, read in 1 MiB chunks (md5 matches dvc.lock; sha1/sha256 for fingerprints)."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _make_parents(path: Path) -> list[Path]:
    """Create the missing parent folders of ``path``; returns those created, deepest first."""
    created = [p for p in path.parents if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    return created


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first: a failed stage leaves no empty folder behind either
        try:
            folder.rmdir()
        except OSError:
            break


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces ``path`` only if the block succeeds."""
    path = Path(path)
    created = _make_parents(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty(created)
        raise
    _remove(path)
    os.replace(tmp, path)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary file path that replaces ``path`` only if the block succeeds."""
    path = Path(path)
    created = _make_parents(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        _remove_empty(created)
        raise
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _jsonable(obj.item())
    return obj


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON atomically; non-finite floats become "inf"/"-inf"/null (valid JSON)."""
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n")


def missing(path: str | os.PathLike, producer: str | None = None) -> DataError:
    """The one-line error for an upstream artifact that does not exist, naming the stage that writes it."""
    hint = f"run the {producer} stage first" if producer else "did the producing stage run?"
    return DataError(f"{path}: not found ({hint})")


def read_json(path: str | os.PathLike, producer: str | None = None) -> Any:
    """Parse a JSON file; a missing file names ``producer``, the stage that writes it."""
    path = Path(path)
    if not path.is_file():
        raise missing(path, producer)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def conform(table: pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    """Return ``table`` with exactly ``schema``'s columns and types, or raise a DataError."""
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise DataError(f"{where}: missing column(s) {', '.join(missing)}")
    extra = [n for n in table.column_names if schema.get_field_index(n) < 0]
    if extra:
        raise DataError(f"{where}: unexpected column(s) {', '.join(extra)}")
    cols = []
    for field in schema:
        col = table.column(field.name)
        if not col.type.equals(field.type):
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise DataError(
                    f"{where}: column {field.name!r} has type {col.type}, expected {field.type} ({exc})"
                ) from None
        if not field.nullable and col.null_count:
            raise DataError(f"{where}: column {field.name!r} has {col.null_count} null value(s)")
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=schema)


def write_table(table: pa.Table, path: str | os.PathLike, schema: pa.Schema) -> pa.Table:
    """Check ``table`` against ``schema`` and write it as parquet atomically."""
    table = conform(table, schema, str(path))
    with atomic_file(path) as tmp:
        pq.write_table(table, tmp)
    return table


def read_table(path: str | os.PathLike, schema: pa.Schema, producer: str | None = None) -> pa.Table:
    """Read a parquet file and check it has exactly ``schema`` (names, types, nullability); a missing file
    names ``producer``, the stage that writes it."""
    path = Path(path)
    if not path.is_file():
        raise missing(path, producer)
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{path}: not a readable parquet file ({exc})") from None
    got = table.schema.remove_metadata()
    want = schema.remove_metadata()
    if not got.equals(want):
        diffs = []
        for field in want:
            idx = got.get_field_index(field.name)
            if idx < 0:
                diffs.append(f"missing {field.name}")
            elif not got.field(idx).type.equals(field.type):
                diffs.append(f"{field.name}: {got.field(idx).type} != {field.type}")
        extra = [n for n in got.names if want.get_field_index(n) < 0]
        diffs += [f"unexpected {n}" for n in extra]
        if diffs:
            raise DataError(f"{path}: schema mismatch ({'; '.join(diffs)})")
        table = conform(table, schema, str(path))
    return table
