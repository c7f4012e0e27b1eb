"""The public contract of the secrets stage: data/secrets/<dataset>.parquet, one row per distinct secret."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..core.io import read_table

SECRETS = pa.schema([
    pa.field("secret_id", pa.string(), nullable=False),
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("value", pa.string(), nullable=False),
    pa.field("prompt", pa.string(), nullable=False),  # s1
    pa.field("continuation", pa.string(), nullable=False),  # s2
    pa.field("source", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("occurrences", pa.int64(), nullable=False),  # training samples containing the value
    # does the *base* model already produce s2 after s1 (greedy), and how likely is s2 under it;
    # null when the base check is off. Later metrics subtract base-model leakage with these.
    pa.field("base_greedy", pa.bool_(), nullable=True),
    pa.field("base_logprob", pa.float64(), nullable=True),
])


def secrets_path(secrets_dir: Path, dataset: str) -> Path:
    return Path(secrets_dir) / f"{dataset}.parquet"


def read_secrets(secrets_dir: Path, dataset: str) -> list[dict]:
    return read_table(secrets_path(secrets_dir, dataset), SECRETS, f"secrets@{dataset}").to_pylist()
