"""The public contract of the secrets stage, one row per distinct secret in each file:

* data/secrets/<dataset>.parquet (SECRETS): which secrets the training split holds (structure only, so it hashes
  the same on any machine);
* ``secrets.reference_dir``/<dataset>.parquet (REFERENCE): whether the *base* model already reproduces each
  (greedy) and its log-probability, model outputs that may differ in the last bits across machines, in a file of
  their own; only the report reads them (``read_reference``).
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..shared.core.io import read_table

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
])

REFERENCE = pa.schema([
    pa.field("secret_id", pa.string(), nullable=False),
    # does the *base* model already produce s2 after s1 (greedy), and how likely is s2 under it;
    # null when the base check is off. Later metrics subtract base-model leakage with these.
    pa.field("base_greedy", pa.bool_(), nullable=True),
    pa.field("base_logprob", pa.float64(), nullable=True),
])


def secrets_path(secrets_dir: Path, dataset: str) -> Path:
    return Path(secrets_dir) / f"{dataset}.parquet"


def read_secrets(secrets_dir: Path, dataset: str) -> list[dict]:
    return read_table(secrets_path(secrets_dir, dataset), SECRETS, f"secrets@{dataset}").to_pylist()


def read_reference(reference_dir: Path, dataset: str) -> list[dict]:
    """The base-model check of each secret of ``dataset`` (REFERENCE rows, the secrets file's order)."""
    return read_table(secrets_path(reference_dir, dataset), REFERENCE, f"secrets@{dataset}").to_pylist()
