"""Prefect flow running the DVC pipeline: one task per DVC stage, in DVC's dependency order.

Each task runs its stage through DVC (``dvc repro --single-item``), so DVC decides whether the
stage is stale and records what ran in dvc.lock; Prefect adds retries, logs, scheduling and the UI. One
``dvc status`` first finds the changed stages: a stage neither changed nor downstream of a changed one is
recorded as up to date without another DVC call. The flow ends with a per-stage time table (ran or cached).
After each stage the flow publishes that stage's dvc.lock entry (dep/out md5s, params, git commit)
as a Prefect markdown artifact, so lineage is visible in the UI; at the end, the report's headline block
with links to the report files (artifact ``headline``). No Prefect result caching: DVC's
cache is the only cache. A signal stops the running stage's process group (dvc repro and its stage) and
ends the run within seconds (``flows.runtime.dvc_adapter.exit_on_signal``); the next run resumes.

    python -m flows.pipeline                     # ephemeral Prefect server, whole DAG
    python -m flows.pipeline --stages audit report
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

if __name__ == "__main__":  # command-line entry: offline Prefect settings before prefect is imported
    from stages.shared.core.prefect_env import apply_offline_defaults

    apply_offline_defaults()

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows.runtime.dvc_adapter import (
    artifact_key,
    changed_stages,
    exit_on_signal,
    headline_artifact,
    lock_markdown,
    repro,
    stage_graph,
    time_table,
    to_run,
)


@task(name="dvc-stage", task_run_name="{stage}", retries=1, retry_delay_seconds=5,
      cache_policy=NO_CACHE, persist_result=False)
def run_stage(stage: str, repo: str, force: bool = False, needed: bool = True) -> dict:
    """The stage through DVC when ``needed`` (``dvc status`` found it or an upstream stage changed), else recorded as
    up to date without another DVC call; either way its dvc.lock entry is published."""
    logger = get_run_logger()
    start = time.perf_counter()
    result = repro(stage, repo, force=force, echo=logger.info) if needed else {"stage": stage, "ran": False}
    result["seconds"] = round(time.perf_counter() - start, 1)
    create_markdown_artifact(key=artifact_key(stage), markdown=lock_markdown(repo, stage),
                             description=f"dvc.lock entry of stage {stage}")
    logger.info("stage %s %s in %.1f s", stage, "ran" if result["ran"] else "was up to date", result["seconds"])
    return result


def select(order: list[str], stages: list[str] | None) -> list[str]:
    if not stages:
        return order
    unknown = [s for s in stages if s not in order and not any(o.split("@")[0] == s for o in order)]
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)} (known: {', '.join(order)})")
    return [o for o in order if o in stages or o.split("@")[0] in stages]


@flow(name="leakage-audit-pipeline", persist_result=False)
def pipeline(repo: str = ".", stages: list[str] | None = None, force: bool = False) -> list[dict]:
    """Run the DVC stages (all, or those named; ``finetune`` selects every ``finetune@run``)."""
    repo = str(Path(repo).resolve())
    logger = get_run_logger()
    full, upstream = stage_graph(repo)
    order = select(full, stages)
    logger.info("stages in DVC order: %s", ", ".join(order))
    stale = set(to_run(full, upstream, changed_stages(repo), force))
    results = [run_stage(s, repo, force, s in stale) for s in order]  # sequential: DVC holds a repo-wide lock
    create_table_artifact(key="pipeline-stages", table=results, description="which stages ran, and their seconds")
    logger.info("per-stage times:\n%s", time_table(results))
    if (headline := headline_artifact(repo)) is not None:
        create_markdown_artifact(key="headline", markdown=headline,
                                 description="what each run leaked, and how sure we are (links to the report)")
    return results


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--stages", nargs="*", default=None)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    with exit_on_signal():  # SIGTERM/SIGINT: the stage stopped, exit 143/130 within seconds
        pipeline(repo=args.repo, stages=args.stages, force=args.force)


if __name__ == "__main__":
    main()
