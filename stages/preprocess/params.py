"""Params of ``preprocess@<dataset>``: the output folder, and each dataset's own params (the dataclass its
spec declares, under ``preprocess.datasets.<name>``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..shared.core.errors import ConfigError
from ..shared.core.params import PARAMS_FILE, load, read_params
from ..shared.datasets import DatasetSpec, get_dataset


@dataclass(frozen=True)
class PreprocessSection:
    out_dir: str
    #: one entry per dataset; dvc.yaml runs one ``preprocess@<name>`` stage per entry
    datasets: dict[str, Any]


def load_dataset_params(dataset: str, path: str | Path = PARAMS_FILE, raw: dict | None = None
                        ) -> tuple[str, DatasetSpec, Any]:
    """(out_dir, the dataset's spec, its params) for ``preprocess@<dataset>``; errors name the key."""
    raw = read_params(path) if raw is None else raw
    section = load(PreprocessSection, "preprocess", path, raw)
    spec = get_dataset(dataset, raw, key="--dataset")
    if dataset not in section.datasets:
        raise ConfigError(f"{path}: preprocess.datasets.{dataset}: no params for this dataset")
    return section.out_dir, spec, load(spec.params, f"preprocess.datasets.{dataset}", path, raw)
