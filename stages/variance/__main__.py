"""DVC stage ``variance``: the empirical-privacy-variance analysis of the sweep table (written by
``leakaudit variance``) -> <variance.out_dir>/analysis.json and its plots. Reruns only when the table (or
this code, or its params) changes."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from stages.shared.core.cli import run_cli, stage_args
from stages.shared.core.io import atomic_dir, write_json
from stages.shared.core.params import load
from stages.variance.params import VarianceParams
from stages.variance.run import analyse_table, draw

log = logging.getLogger("stages.variance")


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__)
    params = load(VarianceParams, "variance", args.params, raw)
    result, rows = analyse_table(params)
    with atomic_dir(Path(params.out_dir)) as tmp:  # analysis.json and plots/ replace the old ones together
        result["plots"] = draw(result, rows, params, tmp / "plots")
        write_json(tmp / "analysis.json", result)
    log.info("variance: %d of %d points completed; %s", result["completed"], result["points"],
             ", ".join(f"ε={e}: SD over configurations {a['variance']['hyperparameter_sd']}"
                       for e, a in result["statistics"][params.primary].items()))


if __name__ == "__main__":
    run_cli(main)
