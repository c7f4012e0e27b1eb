"""What a dataset is to the pipeline, and the registry of datasets.

A ``DatasetSpec`` holds everything the stages need to know about one dataset, in the dataset's own
module: its params (``preprocess.datasets.<name>``), the raw reader with its filters and splits
(``build``), the Arrow schema of its processed rows, its Great Expectations contract, the
(prompt, target) pairs fine-tuning and scoring use, which splits are held out, and where its real
secrets come from. Your own text needs no code: a ``preprocess.datasets.<name>`` entry with ``kind: text``
(``text.py``). A new kind of dataset: its module's spec registered, its import in ``__init__``, its
``preprocess.datasets.<name>`` params and its tests.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from ..core.errors import DataError
from ..core.gx import Expectation, Suite
from ..core.io import read_table
from ..core.params import check
from ..core.registry import Registry

#: per-step counts of a preprocessing run (stats.parquet)
STATS = pa.schema([
    pa.field("step", pa.string(), nullable=False),
    pa.field("count", pa.int64(), nullable=False),
])

#: secret candidates found in a training split (candidates.parquet; held-out samples containing one are dropped)
CANDIDATES = pa.schema([
    pa.field("value", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("count", pa.int64(), nullable=False),  # training samples containing it
])


@dataclass
class Processed:
    """What a dataset reader produces: rows per split, per-step counts and extra tables."""

    schema: pa.Schema
    splits: dict[str, list[dict]]
    stats: list[tuple[str, int]]
    extra: dict[str, tuple[pa.Schema, list[dict]]] = field(default_factory=dict)


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    params: type  # frozen dataclass of preprocess.datasets.<name>
    schema: pa.Schema  # one processed row
    build: Callable[[object], Processed]  # params -> splits, stats, extra tables (reads the raw data)
    contract: Callable[[Processed, object], list[Suite]]  # GX suites the processed data must meet
    pairs: Callable[[list[dict]], list[tuple[str, str]]]  # rows -> (prompt, target) for fine-tuning
    splits: tuple[str, ...] = ("train", "valid", "test")  # every processed split
    eval_split: str = "valid"  # held-out split for utility (validation loss)
    heldout_splits: tuple[str, ...] = ("valid", "test")  # never trained on (held-out canary prefixes)
    auxiliary_split: str = "valid"  # the attacker's auxiliary data (embedding inversion)
    secrets: str | None = None  # the secrets file (data/secrets/<name>.parquet) of this dataset's text
    #: (trained rows, secrets) -> did the trained rows contain each secret (VMR/AIR trained vs control)
    trained_secrets: Callable[[list[dict], list[dict]], list[bool]] | None = None
    users: bool = False  # rows carry a user and user_set (user inference, canary users), splits users.USER_SPLITS
    #: a user-level row's id and text columns (where a canary user's substring goes; the attacker's samples)
    user_columns: tuple[str, str] = ("message_id", "body")
    #: rows -> (source id, text trained on): what the text secret extractors (sequences, PII, named regexes) read
    texts: Callable[[list[dict]], list[tuple[str, str]]] | None = None


DATASETS: Registry[DatasetSpec] = Registry("dataset")
#: the secrets name of a dataset without secrets (``runs.<run>.secrets``): data/secrets/none.parquet is an empty table
#: (``python -m stages.secrets --dataset none``), so every run depends on one secrets file, its dataset's own
NO_SECRETS = "none"


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    return DATASETS.register(spec.name)(spec)


#: datasets only params declare (a text dataset: ``preprocess.datasets.<name>`` with ``kind: text``, text.py):
#: (params -> the names declared, (name, params) -> its spec or None), registered by their module
DECLARED: list[tuple[Callable[[dict], list[str]], Callable[[str, dict], DatasetSpec | None]]] = []


def get_dataset(name: str, raw: dict | None = None, key: str | None = None) -> DatasetSpec:
    """The dataset ``name``: a registered one, or one the params mapping ``raw`` declares (a text dataset). Nothing
    is remembered between calls: a stage resolves its spec once, from the params it read, and passes it on."""
    if name not in DATASETS and raw is not None:
        for _, resolve in DECLARED:
            spec = resolve(name, raw)
            if spec is not None:
                return spec
    return DATASETS.get(name, key)


def secrets_of(name: str, raw: dict | None = None) -> str:
    """The secrets name a run on dataset ``name`` names (``runs.<run>.secrets``): its spec's, or ``NO_SECRETS``."""
    return get_dataset(name, raw).secrets or NO_SECRETS


def dataset_names(raw: dict | None = None) -> list[str]:
    """Every dataset a run may name: the registered ones and those the params mapping ``raw`` declares."""
    return sorted(set(DATASETS.names()).union(*[names(raw or {}) for names, _ in DECLARED]))


# ----------------------------------------------------------------------------- processed data
def split_path(processed_dir: Path, dataset: str, split: str) -> Path:
    return Path(processed_dir) / dataset / f"{split}.parquet"


def read_split(processed_dir: Path, spec: DatasetSpec, split: str) -> list[dict]:
    """The rows of one processed split of the dataset ``spec``, checked against its schema."""
    return read_table(split_path(processed_dir, spec.name, split), spec.schema,
                      f"preprocess@{spec.name}").to_pylist()


def sample(items: list, n: int, seed: int) -> list:
    """A seeded sample of n items (all of them, shuffled, if n >= len)."""
    order = np.random.default_rng(seed).permutation(len(items))
    return [items[i] for i in order[: min(n, len(items))]]


# ----------------------------------------------------------------------------- helpers of the readers
@dataclass(frozen=True)
class SplitParams:
    valid: float
    test: float

    def problems(self):
        return (
            check(0 <= self.valid < 1, "valid", "must be in [0, 1)", self.valid)
            + check(0 <= self.test < 1, "test", "must be in [0, 1)", self.test)
            + check(self.valid + self.test < 1, "test", "valid + test must be < 1", self.valid + self.test)
        )


def row_ranges(rows: dict) -> list[tuple[str, str]]:
    """problems() of a ``rows`` contract param: {split: [min, max]}."""
    return check(all(len(v) == 2 and 0 <= v[0] <= v[1] for v in rows.values()), "rows",
                 "each split needs [min, max] with 0 <= min <= max", rows)


def require_path(path: str | Path, what: str, key: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: {what} not found (set {key} in params.yaml)")
    return p


def split_groups(groups: Sequence, valid: float, test: float, seed: int) -> dict[str, set]:
    """Assign each distinct group (dialogue, author, message) to train/valid/test by a seeded shuffle.

    Sizes are round(n*valid) and round(n*test); the rest is train. Deterministic for a seed.
    """
    uniq = sorted(set(groups), key=lambda g: (str(type(g)), g))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(uniq))
    n_valid = int(round(len(uniq) * valid))
    n_test = int(round(len(uniq) * test))
    shuffled = [uniq[i] for i in order]
    return {
        "valid": set(shuffled[:n_valid]),
        "test": set(shuffled[n_valid:n_valid + n_test]),
        "train": set(shuffled[n_valid + n_test:]),
    }


def split_rows(rows: list[dict], key: str, assign: dict[str, set]) -> dict[str, list[dict]]:
    where = {g: s for s, groups in assign.items() for g in groups}
    out: dict[str, list[dict]] = {s: [] for s in assign}
    for r in rows:
        out[where[r[key]]].append(r)
    return out


def row_count_suites(name: str, splits: dict, ranges: dict) -> list[Suite]:
    """One GX suite per split with a configured [min, max] row count (the ``rows`` contract param)."""
    import pandas as pd

    out = []
    for split, (lo, hi) in ranges.items():
        frame = pd.DataFrame({"n": [1] * len(splits.get(split, []))})
        out.append(Suite(f"{name}_{split}_rows", frame, [Expectation("ExpectTableRowCountToBeBetween",
                                                                     {"min_value": lo, "max_value": hi})]))
    return out
