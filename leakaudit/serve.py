"""Serve the pipeline flow as a deployment so runs can be scheduled and triggered from the Prefect UI.

    prefect server start                                          # terminal 1: UI at http://127.0.0.1:4200
    PREFECT_API_URL=http://127.0.0.1:4200/api python -m leakaudit.serve --cron "0 3 * * *"   # terminal 2
"""
from __future__ import annotations

import argparse

if __name__ == "__main__":  # command-line entry: offline Prefect settings before prefect is imported
    from stages.shared.core.prefect_env import apply_offline_defaults

    apply_offline_defaults()

from flows.pipeline import pipeline


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="leakage-audit")
    ap.add_argument("--cron", default=None, help="schedule, e.g. '0 3 * * *' (none = trigger from the UI)")
    ap.add_argument("--repo", default=".")
    args = ap.parse_args(argv)
    pipeline.serve(name=args.name, cron=args.cron, parameters={"repo": args.repo})


if __name__ == "__main__":
    main()
