from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..registry import Registry


@dataclass(frozen=True)
class Dataset:
    """A dataset reader: ``build(params, out_dir)`` writes the processed splits and returns stats."""

    name: str
    build: Callable  # (params, out_dir: Path) -> list[tuple[str, int]]
    splits: tuple[str, ...] = ("train", "valid", "test")


DATASETS: Registry[Dataset] = Registry("dataset")


def register_dataset(name: str, splits: tuple[str, ...] = ("train", "valid", "test")):
    def deco(fn):
        DATASETS.register(name)(Dataset(name, fn, splits))
        return fn

    return deco


def get_dataset(name: str, key: str | None = None) -> Dataset:
    return DATASETS.get(name, key)
