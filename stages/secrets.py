"""DVC stage ``secrets@<dataset>``: extract real secrets from data/processed/<dataset> -> data/secrets/<dataset>.parquet."""
from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Sequence

from .config import PreprocessParams, SecretsParams, load, stage_args
from .errors import ConfigError, run_cli

log = logging.getLogger("stages.secrets")


def extract(dataset: str, params, processed_dir: Path, splits: Sequence[str]) -> list[dict]:
    """Run the configured extractors over every split; one row per (source, value) secret."""
    from .data.schemas import SCHEMAS
    from .extractors import DATASET_OF, EXTRACTORS
    from .io import read_table

    out = []
    for i, name in enumerate(params.extractors):
        fn = EXTRACTORS.get(name, key=f"secrets.{dataset}.extractors[{i}]")
        if DATASET_OF[name] != dataset:
            raise ConfigError(
                f"secrets.{dataset}.extractors[{i}]: extractor {name!r} reads {DATASET_OF[name]}, not {dataset}"
            )
        for split in splits:
            rows = read_table(processed_dir / f"{split}.parquet", SCHEMAS[dataset]).to_pylist()
            for s in fn(rows, params.prompt_chars):
                out.append({"secret_id": f"{dataset}-{name}-{len(out):06d}", "dataset": dataset, "split": split, **s})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "dataset")
    params = load(SecretsParams, "secrets", args.params, raw)
    pre = load(PreprocessParams, "preprocess", args.params, raw)
    if not hasattr(params, args.dataset):
        raise ConfigError(f"--dataset: no secrets section for {args.dataset!r} (known: enron, tofu)")
    import pyarrow as pa

    from .data import get_dataset
    from .data.schemas import SECRETS
    from .io import write_table

    ds = get_dataset(args.dataset, key="--dataset")
    rows = extract(args.dataset, getattr(params, args.dataset), Path(pre.out_dir) / args.dataset, ds.splits)
    write_table(pa.Table.from_pylist(rows, schema=SECRETS), Path(params.out_dir) / f"{args.dataset}.parquet", SECRETS)
    counts = Counter((r["kind"], r["split"]) for r in rows)
    for (kind, split), n in sorted(counts.items()):
        log.info("%s: %d %s secrets in %s", args.dataset, n, kind, split)  # counts only, never values


if __name__ == "__main__":
    run_cli(main)
