"""Prefect flow for parameter sweeps through DVC experiments.

Each point of the grid is queued with ``dvc exp run --queue -S key=value ...`` and the queue is run
(``--run-all``); DVC caches every stage an experiment shares with the workspace, so only what a
point changes reruns. The flow then reads ``dvc exp show --json --rev <commit the sweep started from>``
(so commits made while the queue runs do not hide its experiments) and writes a comparison table of
the chosen metrics (reports/sweeps/<name>.{json,md}) in which every row names its DVC experiment
(name and commit) and the params it set, and publishes it as a Prefect artifact.

    python -m flows.sweep --name canary_kinds \\
        --set 'canaries.kinds=[random];audit.primary.kind=random' \\
        --set 'canaries.kinds=[unigram];audit.primary.kind=unigram' \\
        --set 'canaries.kinds=[bigram];audit.primary.kind=bigram' \\
        --set 'canaries.kinds=[model_based];audit.primary.kind=model_based'

(each experiment pre-registers its own primary test: ``audit.primary.kind`` must be a kind it inserts).

A point with several params separates them with ';' (--set 'finetune.lr=0.002;finetune.steps=50').
``--collect-only COMMIT`` re-tabulates a finished (or interrupted) sweep without running anything.
Every point's params (params.yaml with its overrides, applied by DVC's own parser) are validated before any point is
queued; the tables come from ``stages.tools.studies.compare``.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from pathlib import Path

if __name__ == "__main__":  # command-line entry: offline Prefect settings before prefect is imported
    from stages.shared.core.prefect_env import apply_offline_defaults

    apply_offline_defaults()

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from stages.params import validate_params
from stages.shared.core.errors import ConfigError
from stages.shared.core.formatting import flatten
from stages.shared.core.params import STUDIES_FILE, read_params
from stages.shared.core.vcs import VcsError, dvc, git, head
from stages.tools.studies.compare import sweep_markdown


def experiment_params(repo: str | Path, sets: list[str]) -> dict:
    """The params.yaml an experiment queued with these `-S` overrides runs with: DVC's own override code applied to
    a copy of the workspace's params.yaml (overrides of other files are not read here)."""
    from dvc.utils.cli_parse import to_path_overrides
    from dvc.utils.hydra import apply_overrides

    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "params.yaml"
        shutil.copyfile(Path(repo) / "params.yaml", target)
        if (Path(repo) / STUDIES_FILE).is_file():  # read with it (stages.shared.core.params.read_params)
            shutil.copyfile(Path(repo) / STUDIES_FILE, Path(tmp) / STUDIES_FILE)
        overrides = to_path_overrides(sets).get("params.yaml", [])
        try:
            apply_overrides(target, overrides)
        except Exception as exc:  # noqa: BLE001 - DVC's parse errors carry their reason in the cause
            reason = " ".join(str(exc.__cause__ or exc).split())
            raise ConfigError(f"--set {' '.join(overrides)}: {reason}") from None
        return read_params(target)


def check_points(repo: str | Path, names: dict[str, list[str]]) -> None:
    """Every point's params validated (the whole file, every section and cross-section rule) before any is queued:
    a bad point is a one-line ConfigError naming the point and the key."""
    for exp, sets in names.items():
        try:
            raw = experiment_params(repo, sets)
        except ConfigError as exc:
            raise ConfigError(f"sweep point {exp}: {exc}") from None
        validate_params(raw, f"params.yaml with sweep point {exp}")


@task(name="queue-experiment", cache_policy=NO_CACHE, persist_result=False)
def queue(name: str, sets: list[str], repo: str) -> str:
    dvc(repo, "exp", "run", "--queue", "-n", name, *[a for s in sets for a in ("-S", s)])
    return name


@task(name="run-queue", cache_policy=NO_CACHE, persist_result=False, retries=0)
def run_queue(repo: str, jobs: int) -> None:
    dvc(repo, "exp", "run", "--run-all", "--jobs", str(jobs))


def committed_metrics(repo: str, metrics_file: str = "reports/metrics.json"):
    """Reader of the metrics file as committed in an experiment's commit: the whole file, lists included
    (`dvc exp show` keeps only scalars, so bootstrap intervals would be lost). None if it is not committed."""
    def read(rev: str) -> dict | None:
        try:
            return json.loads(git(repo, "show", f"{rev}:{metrics_file}"))
        except VcsError:
            return None
    return read


def collect(show: list, names: list[str], metrics_file: str = "reports/metrics.json", read=None) -> list[dict]:
    """Rows {experiment, rev, metrics} for the named experiments in `dvc exp show --json`; `read(rev)` may supply
    the full metrics of a commit, else the scalars `dvc exp show` carries are used."""
    rows = []
    for entry in show:
        for exp in entry.get("experiments") or []:
            for rev in exp.get("revs") or []:
                if rev.get("name") not in names:
                    continue
                data = rev.get("data") or {}
                full = read(rev["rev"]) if read and rev.get("rev") else None
                metrics = flatten(full if full is not None else
                                  (data.get("metrics") or {}).get(metrics_file, {}).get("data", {}))
                rows.append({"experiment": rev.get("name"), "rev": rev.get("rev"), "metrics": metrics})
    return rows


def queue_status(repo: str) -> dict[str, str]:
    """Experiment name -> status (Queued, Running, Success, Failed, ...) from `dvc queue status`."""
    out = {}
    for line in dvc(repo, "queue", "status").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 4 and re.fullmatch(r"[0-9a-f]{7,}", parts[0]):
            out[parts[1]] = parts[-1]
    return out


def write_tables(name: str, names: dict[str, list[str]], baseline: str, repo: str,
                 keys: list[str] | None = None) -> tuple[list[dict], str]:
    """Collect the named experiments derived from `baseline` and write reports/sweeps/<name>.{json,md}."""
    status = queue_status(repo)
    unfinished = {n: status[n] for n in names if status.get(n, "Success") != "Success"}
    if unfinished:
        raise RuntimeError(f"sweep {name}: experiments not finished: "
                           + ", ".join(f"{n} ({st}; `dvc queue logs {n}`)" for n, st in unfinished.items()))
    rows = collect(json.loads(dvc(repo, "exp", "show", "--json", "--rev", baseline)), list(names),
                   read=committed_metrics(repo))
    order = {n: i for i, n in enumerate(names)}
    rows.sort(key=lambda r: order[r["experiment"]])
    missing = sorted(set(names) - {r["experiment"] for r in rows})
    if missing:
        raise RuntimeError(f"sweep {name}: no experiment {', '.join(missing)} derived from commit {baseline[:8]} "
                           "(`dvc exp show --rev` lists what exists)")
    md = sweep_markdown(name, baseline, rows, names, keys)
    out = Path(repo) / "reports" / "sweeps"
    out.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".json", json.dumps({"baseline": baseline, "points": names, "rows": rows}, indent=2)),
                         (".md", md)):
        tmp = out / f".{name}{suffix}.tmp"
        tmp.write_text(text)
        tmp.replace(out / f"{name}{suffix}")
    return rows, md


@flow(name="leakage-audit-sweep", persist_result=False)
def sweep(name: str, points: list[list[str]], repo: str = ".", jobs: int = 1,
          keys: list[str] | None = None, collect_only: str | None = None) -> list[dict]:
    """Queue and run one DVC experiment per point, then tabulate them. With `collect_only` (a baseline commit),
    only tabulate the experiments of an earlier sweep with the same name and points."""
    repo = str(Path(repo).resolve())
    log = get_run_logger()
    names = {f"{name}-{i}": pts for i, pts in enumerate(points)}
    baseline = collect_only or head(repo)
    if not collect_only:
        check_points(repo, names)
        for exp, pts in names.items():
            queue(exp, pts, repo)
            log.info("queued %s: %s", exp, " ".join(pts))
        run_queue(repo, jobs)
    rows, md = write_tables(name, names, baseline, repo, keys)
    create_markdown_artifact(key=f"sweep-{name}".lower().replace("_", "-"), markdown=md,
                             description=f"DVC experiments of sweep {name}")
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True)
    ap.add_argument("--set", action="append", required=True, dest="sets",
                    help="one sweep point: key=value[;key=value...] (repeat --set for more points)")
    ap.add_argument("--repo", default=".")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--key", action="append", dest="keys", help="metric path suffix to tabulate (repeatable)")
    ap.add_argument("--collect-only", metavar="COMMIT",
                    help="do not run: tabulate this sweep's experiments derived from COMMIT "
                         "(e.g. after an interruption)")
    args = ap.parse_args(argv)
    points = [s.split(";") for s in args.sets]
    if not args.collect_only:  # a bad point fails here, before Prefect starts
        check_points(args.repo, {f"{args.name}-{i}": pts for i, pts in enumerate(points)})
    sweep(name=args.name, points=points, repo=args.repo, jobs=args.jobs, keys=args.keys,
          collect_only=args.collect_only)


if __name__ == "__main__":
    from stages.shared.core.cli import run_cli

    run_cli(main)
