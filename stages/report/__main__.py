"""DVC stage ``report``: reports/report.md, self-contained reports/index.html, ROC plots and
reports/lineage.json (every number -> stage, input md5s, params, git commit)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from stages.report.build import build_report
from stages.report.params import ReportParams
from stages.shared.core.artifacts import locations
from stages.shared.core.cli import run_cli, stage_args
from stages.shared.core.params import load, section_of

log = logging.getLogger("stages.report")


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, extra=[("--lock", {"default": "dvc.lock"})])
    params = load(ReportParams, "report", args.params, raw)
    variance = section_of(raw, "variance.out_dir")
    study = section_of(raw, "study.out_dir")
    selfcheck = section_of(raw, "selfcheck.out")
    mutants = section_of(raw, "selfcheck.mutants")
    plan = section_of(raw, "user_level.out")
    lineage = build_report(params.title, locations(raw, args.params), Path(args.lock), Path(params.out_dir),
                           variance_dir=Path(variance) if variance else None,
                           study_dir=Path(study) if study else None,
                           selfcheck=Path(selfcheck) if selfcheck else None,
                           selfcheck_mutants=Path(mutants) if mutants else None,
                           user_level_plan=Path(plan) if plan else None,
                           user_level=Path(params.user_level), user_inference=Path(params.user_inference),
                           positive_control=Path(params.positive_control),
                           positive_control_power=Path(params.positive_control_power))
    log.info("report: %d numbers with lineage -> %s/report.md, %s/index.html", len(lineage), params.out_dir,
             params.out_dir)


if __name__ == "__main__":
    run_cli(main)
