"""Where each stage's outputs live: the ``out``/``out_dir`` keys of params.yaml, read in one place.

A stage reads its upstream artifacts through these locations (and the upstream stage's public schema
module for what is inside them); it writes its own output to its own section's ``out``/``out_dir``.
dvc.yaml uses the same keys (``${model.out}``, ...), so params, code and DVC outputs cannot drift apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .params import PARAMS_FILE, section_of

#: field -> the params key holding that location
KEYS = {
    "base_model": "model.out",
    "processed": "preprocess.out_dir",
    "secrets": "secrets.out_dir",
    "canaries": "canaries.out_dir",
    "models": "finetune.out_dir",
    "scores": "attack.out_dir",
    "metrics": "audit.out",
    "roc": "audit.roc_out",
    "reports": "report.out_dir",
}


@dataclass(frozen=True)
class Locations:
    base_model: Path  # data/models/base: the base model and tokenizer
    processed: Path  # data/processed/<dataset>/<split>.parquet
    secrets: Path  # data/secrets/<dataset>.parquet
    canaries: Path  # data/canaries/
    models: Path  # data/models/<run>/: fine-tuned runs
    scores: Path  # data/scores/<run>/: attack outputs
    metrics: Path  # reports/metrics.json
    roc: Path  # reports/roc.parquet: ROC curves of every membership score
    reports: Path  # reports/

    def run_dir(self, run: str) -> Path:
        return self.models / run

    def scores_dir(self, run: str) -> Path:
        return self.scores / run


def locations(raw: dict, path: str | Path = PARAMS_FILE) -> Locations:
    """Every stage's output location from the raw params; a missing or empty key is a one-line error."""
    out = {}
    for name, key in KEYS.items():
        value = section_of(raw, key)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{path}: {key}: expected a non-empty path (got {value!r})")
        out[name] = Path(value)
    return Locations(**out)
