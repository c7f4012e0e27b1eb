"""DVC stage ``preprocess@<dataset>``: raw data -> data/processed/<dataset>/{splits,stats,...}.parquet,
checked against the dataset's pyarrow schema and Great Expectations contract (gx_results.json)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from .config import PreprocessParams, load, stage_args
from .errors import ConfigError, run_cli
from .io import atomic_dir

log = logging.getLogger("stages.preprocess")


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "dataset")
    params = load(PreprocessParams, "preprocess", args.params, raw)
    from .checks.contracts import check_processed
    from .data import get_dataset
    from .data.common import write_processed
    from .io import write_json

    dataset = get_dataset(args.dataset, key="--dataset")
    ds_params = getattr(params.datasets, args.dataset, None)
    if ds_params is None:
        raise ConfigError(f"{args.params}: preprocess.datasets.{args.dataset}: no params for this dataset")
    out = Path(params.out_dir) / args.dataset
    processed = dataset.build(ds_params)
    report = check_processed(args.dataset, processed, ds_params, str(out))
    with atomic_dir(out) as tmp:
        write_processed(tmp, processed)
        write_json(tmp / "gx_results.json", report)
    for step, count in processed.stats:
        log.info("%s: %s = %d", args.dataset, step, count)


if __name__ == "__main__":
    run_cli(main)
