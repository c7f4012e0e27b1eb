"""The sweep table: one row per point of a variance sweep (rows built by ``table.py``, written by flows/variance.py,
read by the ``variance`` stage). Parquet with a fixed schema; the sweep's name, base commit and params ride in the
schema metadata, so the table alone says what produced it. No wall times, paths or hosts: the same sweep gives the
same bytes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import pyarrow as pa

from ..shared.core.errors import DataError
from ..shared.core.io import read_table, write_table

PROFILE = pa.list_(pa.struct([("delta", pa.float64()), ("epsilon", pa.float64())]))
POINTS = pa.schema([
    ("point", pa.string()),         # the DVC experiment's name
    ("rev", pa.string()),           # the experiment's git commit (null: failed)
    ("status", pa.string()),        # completed | failed
    ("error", pa.string()),         # the failure, one line (null: completed)
    ("epsilon", pa.float64()),      # the target epsilon sigma was calibrated to
    ("batch_size", pa.int64()),
    ("steps", pa.int64()),
    ("lr", pa.float64()),
    ("seed", pa.int64()),
    ("utility", pa.float64()),      # minus the validation loss (higher is better)
    ("valid_loss", pa.float64()),
    ("eps_spent", pa.float64()),    # the accountant's epsilon at delta
    ("delta", pa.float64()),
    ("sigma", pa.float64()),
    ("sample_rate", pa.float64()),
    ("measure", pa.string()),       # vmr | air
    ("score_mean", pa.float64()),   # mean over the trained secrets of (fine-tuned - base) score
    ("score_max", pa.float64()),    # max over the trained secrets of (fine-tuned - base) score
    ("secrets", pa.int64()),        # trained secrets scored
    ("control_mean", pa.float64()), # mean (fine-tuned - base) score of the randomised held-out secrets: the score
    #                                 without training on them (null: the run had no randomised control)
    ("eps_hat", pa.float64()),      # the pre-registered one-run audit's epsilon lower bound at the first of
    #                                 audit.primary.confidences (0.95 by default; null: no canaries)
    ("eps_hat_99", pa.float64()),   # the same at 0.99 (null: no canaries, or 0.99 not among the confidences)
    ("exposure", pa.float64()),     # mean exposure (bits) of the inserted secret-sharer canaries (null: none)
    ("profile", PROFILE),           # the accountant's privacy profile epsilon(delta)
])

#: the column of each statistic of the privacy score (variance.primary: mean | max)
SCORE_COLUMNS = {"mean": "score_mean", "max": "score_max"}


def write_points(path: str | Path, rows: list[dict], meta: Mapping) -> None:
    table = pa.Table.from_pylist(rows, schema=POINTS.with_metadata({"sweep": json.dumps(meta, sort_keys=True)}))
    write_table(table, path, POINTS.with_metadata(table.schema.metadata))


def _sweep_meta(path: str | Path) -> dict:
    """The sweep's metadata (name, base commit, params) from the table's schema."""
    import pyarrow.parquet as pq

    return json.loads((pq.read_schema(path).metadata or {}).get(b"sweep", b"{}"))


def read_points(path: str | Path) -> tuple[list[dict], dict]:
    """The rows and the sweep's metadata (name, base commit, params)."""
    table = read_table(path, POINTS, producer="the variance sweep (leakaudit variance)")
    return table.to_pylist(), _sweep_meta(path)


def read_point_refs(path: str | Path) -> tuple[list[dict], dict]:
    """Each row's point, experiment commit and error, and the metadata, from a sweep table of any schema version
    (what ``leakaudit variance --retabulate`` rebuilds the table from)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=["point", "rev", "error"])
        meta = _sweep_meta(path)
    except (pa.ArrowInvalid, OSError, KeyError, ValueError) as exc:
        raise DataError(f"{path}: not a variance sweep table ({exc})") from None
    return table.to_pylist(), meta


#: The pre-registered study's table (``variance.study.table``): one row per model (configuration x seed), written by
#: ``leakaudit variance --study`` as each model completes, read by the ``variance`` stage (Q1, Q2) and the report.
AUDIT_POINTS = pa.schema([
    ("point", pa.string()),         # the DVC experiment's name (study-<config>-s<seed>)
    ("config", pa.string()),        # the configuration's name in variance.study.configs
    ("seed", pa.int64()),           # canaries.seed and the run's seed (canary draw, coins, sample, sampler, noise):
    #                                 every configuration trains at each seed, so a seed is a block of the design
    ("status", pa.string()),        # completed | failed
    ("error", pa.string()),         # the failure, one line (null: completed)
    ("base_commit", pa.string()),   # the commit the experiment ran from
    ("rev", pa.string()),           # the experiment's git commit (null: failed)
    ("epsilon", pa.float64()),      # the target epsilon sigma was calibrated to
    ("delta", pa.float64()),
    ("accountant_epsilon", pa.float64()),   # the accountant's epsilon at delta after the run
    ("sample_rate", pa.float64()),
    ("steps", pa.int64()),
    ("batch_size", pa.int64()),
    ("lr", pa.float64()),
    ("noise_multiplier", pa.float64()),
    ("m", pa.int64()),              # the primary test: canaries, guesses, correct guesses
    ("r", pa.int64()),
    ("v", pa.int64()),
    ("k_pos", pa.int64()),          # the primary guessing rule the model was audited with ("in" and "out" guesses)
    ("k_neg", pa.int64()),
    ("seed_status", pa.string()),   # preregistered | development (audit.seeds)
    ("eps_lb_95", pa.float64()),    # Steinke et al.'s one-run bound at 95% (the primary test's)
    ("gdp_eps_lb_95", pa.float64()),  # the same counts under the Gaussian trade-off assumption
    ("member_shift", pa.float64()),  # the primary attack's mean member score in non-member SDs (canary_response)
    ("ideal_eps_lb_95_median", pa.float64()),  # the last-iterate ideal's median bound at this q, T, sigma (heuristic)
    ("valid_perplexity", pa.float64()),
    ("exposure", pa.float64()),     # mean exposure (bits) of the inserted secret-sharer canaries
    ("exposure_control", pa.float64()),  # the same of the candidates never inserted (the control)
])


def write_audit_points(path: str | Path, rows: list[dict], meta: Mapping) -> None:
    table = pa.Table.from_pylist(rows, schema=AUDIT_POINTS.with_metadata({"study": json.dumps(meta, sort_keys=True)}))
    write_table(table, path, AUDIT_POINTS.with_metadata(table.schema.metadata))


def read_audit_points(path: str | Path) -> tuple[list[dict], dict]:
    """The study's rows and its metadata (the registered params it ran)."""
    import pyarrow.parquet as pq

    table = read_table(path, AUDIT_POINTS, producer="the pre-registered study (leakaudit variance --study)")
    return table.to_pylist(), json.loads((pq.read_schema(path).metadata or {}).get(b"study", b"{}"))
