"""DVC stage ``preprocess@<dataset>``: raw data -> data/processed/<dataset>/{splits}.parquet + stats."""
from __future__ import annotations

import logging
from typing import Sequence

from .config import PreprocessParams, load, stage_args
from .errors import run_cli
from .io import atomic_dir

log = logging.getLogger("stages.preprocess")


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "dataset")
    from .data import get_dataset
    from pathlib import Path

    params = load(PreprocessParams, "preprocess", args.params, raw)
    dataset = get_dataset(args.dataset, key="--dataset")
    ds_params = getattr(params.datasets, args.dataset)
    with atomic_dir(Path(params.out_dir) / args.dataset) as tmp:
        stats = dataset.build(ds_params, tmp)
    for step, count in stats:
        log.info("%s: %s = %d", args.dataset, step, count)


if __name__ == "__main__":
    run_cli(main)
