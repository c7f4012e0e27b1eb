"""DVC stage ``data_docs``: every processed dataset's Great Expectations results (gx_results.json, written by its
preprocess stage) rendered by GX as Data Docs -> <report.out_dir>/data_docs/ (one page per suite and an index). Its own
stage, so GX is imported only when a dataset's results change, not whenever the report is rebuilt."""
from __future__ import annotations

import logging
from typing import Sequence

from stages.data_docs.build import build_data_docs, results_of
from stages.shared.core.artifacts import locations
from stages.shared.core.cli import run_cli, stage_args

log = logging.getLogger("stages.data_docs")


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__)
    where = locations(raw, args.params)
    rows = build_data_docs(results_of(where.processed), where.reports / "data_docs")
    log.info("data_docs: %d suite pages -> %s", len(rows), (where.reports / "data_docs" / "index.html").as_posix())


if __name__ == "__main__":
    run_cli(main)
