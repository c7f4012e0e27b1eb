"""Params of ``secrets@<dataset>`` (the ``secrets`` section; one entry per dataset with secrets)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..shared.core.errors import ConfigError
from ..shared.core.params import PARAMS_FILE, check, load
from ..shared.datasets.spec import NO_SECRETS


@dataclass(frozen=True)
class MiningParams:
    """Candidate mining in a dataset's training text where preprocess found none (a text dataset)."""

    ngram_chars: int                 # recurring sequences: character n-grams of this length ...
    top_k: int                       # ... the k most frequent ...
    min_count: int                   # ... in at least this many training texts, merged into maximal strings

    def problems(self):
        return (check(self.ngram_chars > 0, "ngram_chars", "must be > 0", self.ngram_chars)
                + check(self.top_k > 0, "top_k", "must be > 0", self.top_k)
                + check(self.min_count >= 1, "min_count", "must be >= 1", self.min_count))


@dataclass(frozen=True)
class DatasetSecretsParams:
    extractors: tuple[str, ...]      # registered extractors, or names of ``patterns``
    #: PII: characters of text before the value kept as its prompt
    prompt_chars: int
    #: recurring sequences: the prompt s1 ends at the whitespace nearest this fraction of the length
    prompt_fraction: float
    min_occurrences: int
    #: keep at most this many secrets per kind, most frequent first (null = all)
    max_per_kind: Optional[int]
    #: record whether the base model already reproduces each secret (one batched forward pass)
    base_check: bool
    #: named regexes: each match in the training text is a secret of that kind (its name in ``extractors``)
    patterns: dict[str, str]
    #: candidate mining where preprocess wrote no candidates.parquet (null: none needed, e.g. TOFU's genre)
    mining: Optional[MiningParams]

    def problems(self):
        return (check(len(self.extractors) > 0, "extractors", "needs at least one extractor", self.extractors)
                + check(self.prompt_chars > 0, "prompt_chars", "must be > 0", self.prompt_chars)
                + check(0 < self.prompt_fraction < 1, "prompt_fraction", "must be in (0, 1)", self.prompt_fraction)
                + check(self.min_occurrences >= 1, "min_occurrences", "must be >= 1", self.min_occurrences)
                + check(self.max_per_kind is None or self.max_per_kind > 0, "max_per_kind", "must be > 0",
                        self.max_per_kind)
                + [p for name, rx in self.patterns.items() for p in check(_compiles(rx), f"patterns.{name}",
                                                                          "not a valid regular expression", rx)])


def _compiles(rx: str) -> bool:
    import re

    try:
        re.compile(rx)
    except re.error:
        return False
    return True


@dataclass(frozen=True)
class SecretsParams:
    out_dir: str
    #: the base-model check of each secret (<dataset>.parquet, REFERENCE): floats, kept apart from which secrets
    reference_dir: str
    #: forward-pass batch size of the base-model check
    batch_size: int
    #: one ``secrets@<name>`` stage per entry (dvc.yaml foreach)
    datasets: dict[str, DatasetSecretsParams]

    def problems(self):
        return (check(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
                + check(NO_SECRETS not in self.datasets, f"datasets.{NO_SECRETS}",
                        "is reserved: the empty secrets table of runs whose dataset has none", NO_SECRETS))


def load_secrets(dataset: str, path: str | Path = PARAMS_FILE, raw: dict | None = None) -> tuple[SecretsParams,
                                                                                                   DatasetSecretsParams]:
    params = load(SecretsParams, "secrets", path, raw)
    if dataset not in params.datasets:
        raise ConfigError(f"--dataset: no secrets section for {dataset!r} (known: {', '.join(params.datasets)})")
    return params, params.datasets[dataset]
