"""DVC stage ``report``: reports/report.md, self-contained reports/index.html, ROC plots and
reports/lineage.json (every number -> stage, input md5s, params, git commit)."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Sequence

from .config import AttackParams, AuditParams, PreprocessParams, ReportParams, SecretsParams, load, read_params
from .errors import run_cli

log = logging.getLogger("stages.report")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--lock", default="dvc.lock")
    args = ap.parse_args(argv)
    raw = read_params(args.params)
    params = load(ReportParams, "report", args.params, raw)
    audit = load(AuditParams, "audit", args.params, raw)
    attack = load(AttackParams, "attack", args.params, raw)
    pre = load(PreprocessParams, "preprocess", args.params, raw)
    sec = load(SecretsParams, "secrets", args.params, raw)
    from .reporting.build import build_report

    lineage = build_report(params.title, Path(audit.out), Path(attack.out_dir), Path(pre.out_dir),
                           Path(sec.out_dir), Path(args.lock), Path(params.out_dir))
    log.info("report: %d numbers with lineage -> %s/report.md, %s/index.html", len(lineage), params.out_dir, params.out_dir)


if __name__ == "__main__":
    run_cli(main)
