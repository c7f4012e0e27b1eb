"""Where each stage's outputs live: one typed declaration, derived from the ``out``/``out_dir`` keys of params.yaml.

Each field of ``Locations`` names its params key (``key(...)``), so the field, its type and the key it is read
from are declared together, once. A stage reads its upstream artifacts through these locations (and the
upstream stage's public schema module for what is inside them) and writes its own output to its own section's
``out``/``out_dir``, the same key. dvc.yaml uses the same keys (``${model.out}``, ...), so params, code and DVC
outputs cannot drift apart.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .params import PARAMS_FILE, section_of


def key(params_key: str):
    """A ``Locations`` field read from the dotted ``params_key``."""
    return dataclasses.field(metadata={"key": params_key})


@dataclass(frozen=True)
class Locations:
    base_model: Path = key("model.out")  # data/models/base: the base model and tokenizer
    processed: Path = key("preprocess.out_dir")  # data/processed/<dataset>/<split>.parquet
    secrets: Path = key("secrets.out_dir")  # data/secrets/<dataset>.parquet
    canaries: Path = key("canaries.out_dir")  # data/canaries/
    #: model outputs of the upstream structure, in files of their own (floats may differ across machines)
    secret_reference: Path = key("secrets.reference_dir")  # data/reference/secrets/<dataset>.parquet
    canary_reference: Path = key("canaries.reference_out")  # data/reference/canaries.parquet
    models: Path = key("finetune.out_dir")  # data/models/<run>/: fine-tuned runs
    scores: Path = key("attack.out_dir")  # data/scores/<run>/: attack outputs
    metrics: Path = key("audit.out")  # reports/metrics.json
    roc: Path = key("audit.roc_out")  # reports/roc.parquet: ROC curves of every membership score
    reports: Path = key("report.out_dir")  # reports/

    def run_dir(self, run: str) -> Path:
        return self.models / run

    def scores_dir(self, run: str) -> Path:
        return self.scores / run


#: field -> the params key holding that location (derived from ``Locations``; kept for readers of the keys)
KEYS = {f.name: f.metadata["key"] for f in dataclasses.fields(Locations)}


def locations(raw: dict, path: str | Path = PARAMS_FILE) -> Locations:
    """Every stage's output location from the raw params; a missing or empty key is a one-line error."""
    out = {}
    for f in dataclasses.fields(Locations):
        value = section_of(raw, f.metadata["key"])
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{path}: {f.metadata['key']}: expected a non-empty path (got {value!r})")
        out[f.name] = Path(value)
    return Locations(**out)
