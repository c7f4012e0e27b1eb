"""DVC stage ``preprocess@<dataset>``: raw data -> data/processed/<dataset>/{splits,stats,...}.parquet,
checked against the dataset's pyarrow schema and Great Expectations contract (gx_results.json)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from stages.preprocess.params import load_dataset_params
from stages.preprocess.write import write_processed
from stages.shared.core.cli import run_cli, stage_args
from stages.shared.core.gx import check_suites
from stages.shared.core.io import atomic_dir, write_json

log = logging.getLogger("stages.preprocess")


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "dataset")
    out_dir, spec, params = load_dataset_params(args.dataset, args.params, raw)
    out = Path(out_dir) / args.dataset
    processed = spec.build(params)
    report = check_suites(spec.contract(processed, params), str(out))
    with atomic_dir(out) as tmp:
        write_processed(tmp, processed)
        write_json(tmp / "gx_results.json", report)
    for step, count in processed.stats:
        log.info("%s: %s = %d", args.dataset, step, count)


if __name__ == "__main__":
    run_cli(main)
