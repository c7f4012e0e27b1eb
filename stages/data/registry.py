from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from ..registry import Registry


@dataclass
class Processed:
    """What a dataset reader produces: rows per split, per-step counts and extra tables."""

    schema: pa.Schema
    splits: dict[str, list[dict]]
    stats: list[tuple[str, int]]
    extra: dict[str, tuple[pa.Schema, list[dict]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Dataset:
    """``build(params) -> Processed``; ``contract(processed, params)`` -> GX suites to run on it."""

    name: str
    build: Callable
    contract: Callable | None = None


DATASETS: Registry[Dataset] = Registry("dataset")


def register_dataset(name: str, contract: Callable | None = None):
    def deco(fn):
        DATASETS.register(name)(Dataset(name, fn, contract))
        return fn

    return deco


def get_dataset(name: str, key: str | None = None) -> Dataset:
    return DATASETS.get(name, key)
