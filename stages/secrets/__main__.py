"""DVC stage ``secrets@<dataset>``: real secrets of the training split -> data/secrets/<dataset>.parquet.

``--dataset none`` (stage ``no_secrets``) writes data/secrets/none.parquet, the empty table a run whose dataset has
no secrets names (``runs.<run>.secrets: none``): every run depends on its own dataset's secrets file only.

Extractors read data/processed/<dataset>/train.parquet and the secret candidates preprocess found
there; data/reference/secrets/<dataset>.parquet records whether the base model already reproduces each
(greedy, teacher-forced) and its base log-probability, so the report can subtract base-model leakage (model
outputs in a file of their own: which secrets exist hashes the same on any machine).
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Sequence

import pyarrow as pa

from stages.secrets.extract import base_reproduction, extract
from stages.secrets.params import SecretsParams, load_secrets
from stages.secrets.schema import REFERENCE, SECRETS, secrets_path
from stages.shared.core.artifacts import locations
from stages.shared.core.cli import run_cli, stage_args
from stages.shared.core.io import atomic_file, write_table
from stages.shared.core.params import load
from stages.shared.datasets import NO_SECRETS, get_dataset

log = logging.getLogger("stages.secrets")


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "dataset")
    if args.dataset == NO_SECRETS:
        out_dir = load(SecretsParams, "secrets", args.params, raw).out_dir
        with atomic_file(secrets_path(out_dir, NO_SECRETS)) as out:
            write_table(SECRETS.empty_table(), out, SECRETS)
        return
    params, ds_params = load_secrets(args.dataset, args.params, raw)
    where = locations(raw, args.params)
    rows = extract(get_dataset(args.dataset, raw), ds_params, where.processed)
    if ds_params.base_check and rows:
        base_reproduction(rows, where.base_model, params.batch_size)
    for r in rows:
        r.setdefault("base_greedy", None)
        r.setdefault("base_logprob", None)
    reference = pa.Table.from_pylist(rows, schema=REFERENCE)
    with atomic_file(secrets_path(params.out_dir, args.dataset)) as out, \
            atomic_file(secrets_path(params.reference_dir, args.dataset)) as ref:  # both files, or neither
        write_table(reference, ref, REFERENCE)
        write_table(pa.Table.from_pylist(rows, schema=SECRETS), out, SECRETS)
    counts = Counter(r["kind"] for r in rows)
    base = Counter(r["kind"] for r in rows if r.get("base_greedy"))
    for kind, n in sorted(counts.items()):  # counts only, never values
        log.info("%s: %d %s secrets (%d already reproduced by the base model)", args.dataset, n, kind, base[kind])


if __name__ == "__main__":
    run_cli(main)
