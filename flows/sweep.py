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
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

if __name__ == "__main__":  # command-line entry: offline Prefect settings before prefect is imported
    from flows.settings import apply_offline_defaults

    apply_offline_defaults()

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from stages.audit.schema import NON_CANARY_GROUPS
from stages.report.render import Table, ci, flatten, fmt, md_table


def _dvc(args: list[str], repo: str) -> str:
    proc = subprocess.run(["dvc", *args], cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"dvc {' '.join(args)} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return proc.stdout


@task(name="queue-experiment", cache_policy=NO_CACHE, persist_result=False)
def queue(name: str, sets: list[str], repo: str) -> str:
    _dvc(["exp", "run", "--queue", "-n", name, *[a for s in sets for a in ("-S", s)]], repo)
    return name


@task(name="run-queue", cache_policy=NO_CACHE, persist_result=False, retries=0)
def run_queue(repo: str, jobs: int) -> None:
    _dvc(["exp", "run", "--run-all", "--jobs", str(jobs)], repo)


def committed_metrics(repo: str, metrics_file: str = "reports/metrics.json"):
    """Reader of the metrics file as committed in an experiment's commit: the whole file, lists included
    (`dvc exp show` keeps only scalars, so bootstrap intervals would be lost). None if it is not committed."""
    def read(rev: str) -> dict | None:
        proc = subprocess.run(["git", "show", f"{rev}:{metrics_file}"], cwd=repo, capture_output=True, text=True)
        return json.loads(proc.stdout) if proc.returncode == 0 else None
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


def _with_ci(metrics: dict, base: str) -> str:
    """value [lo, hi] when the metrics carry the interval next to the value (x / x_ci95, or value / ci95)."""
    v, lo_hi = metrics.get(base), metrics.get(base + "_ci95") or metrics.get(base.rsplit(".", 1)[0] + ".ci95")
    return ci(v, lo_hi) if v is not None and isinstance(lo_hi, list) and len(lo_hi) == 2 else fmt(v)


def canary_table(rows: list[dict], sets: dict[str, list[str]], attack: str = "loss") -> str:
    """One line per (experiment, run, canary kind): TPR@1%FPR and AUROC with their 95% bootstrap intervals, and the
    run's pre-registered epsilon-hat on the line of the kind its primary test uses."""
    pat = re.compile(rf"^runs\.([^.]+)\.attacks\.{re.escape(attack)}\.([^.]+)\.auroc$")
    t = Table(["experiment", "params set", "run", "canary kind", "members / non-members", "TPR@1%FPR [95% CI]",
               "AUROC [95% CI]", "primary test", "ε̂95", "ε̂99"])
    for r in rows:
        m = r["metrics"]
        for key in sorted(k for k in m if pat.match(k)):
            run, kind = pat.match(key).groups()
            if kind in NON_CANARY_GROUPS:
                continue
            b, p = f"runs.{run}.attacks.{attack}.{kind}", f"runs.{run}.audit_primary"
            primary = m.get(p + ".kind") == kind
            t.rows.append([r["experiment"], " ".join(sets.get(r["experiment"], [])), run, kind,
                           f"{fmt(m.get(b + '.members'))} / {fmt(m.get(b + '.non_members'))}",
                           _with_ci(m, b + ".tpr_at_fpr.0.01.value"), _with_ci(m, b + ".auroc"),
                           f"{m.get(p + '.attack')}, k₊={m.get(p + '.k_pos')}, k₋={m.get(p + '.k_neg')}" if primary
                           else "–", m.get(p + ".eps_lb_95") if primary else None,
                           m.get(p + ".eps_lb_99") if primary else None])
    return md_table(t) if t.rows else ""


def table(rows: list[dict], sets: dict[str, list[str]], keys: list[str]) -> str:
    t = Table(["experiment", "commit", "params set", *keys])
    for r in rows:
        vals = ["; ".join(fmt(v) for m, v in r["metrics"].items() if m.endswith(k)) or None for k in keys]
        t.rows.append([r["experiment"], f"`{(r['rev'] or '')[:8]}`", " ".join(sets.get(r["experiment"], [])), *vals])
    return md_table(t)


def queue_status(repo: str) -> dict[str, str]:
    """Experiment name -> status (Queued, Running, Success, Failed, ...) from `dvc queue status`."""
    out = {}
    for line in _dvc(["queue", "status"], repo).splitlines()[1:]:
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
    rows = collect(json.loads(_dvc(["exp", "show", "--json", "--rev", baseline], repo)), list(names),
                   read=committed_metrics(repo))
    order = {n: i for i, n in enumerate(names)}
    rows.sort(key=lambda r: order[r["experiment"]])
    missing = sorted(set(names) - {r["experiment"] for r in rows})
    if missing:
        raise RuntimeError(f"sweep {name}: no experiment {', '.join(missing)} derived from commit {baseline[:8]} "
                           "(`dvc exp show --rev` lists what exists)")
    keys = keys or ["loss.new_token.auroc", "loss.random.auroc", "audit_primary.eps_lb_95"]
    md = f"# Sweep {name}\n\nDVC experiments derived from commit `{baseline[:8]}`.\n\n" + table(rows, names, keys) + "\n"
    kinds = canary_table(rows, names)
    if kinds:
        md += ("\nLoss attack on the canaries of every run of every experiment (95% bootstrap intervals over members "
               "and non-members; ε̂ is each run's pre-registered test, audit.primary):\n\n" + kinds + "\n")
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
    baseline = collect_only or subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                                              text=True, check=True).stdout.strip()
    if not collect_only:
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
                    help="do not run: tabulate this sweep's experiments derived from COMMIT (e.g. after an interruption)")
    args = ap.parse_args(argv)
    points = [s.split(";") for s in args.sets]
    sweep(name=args.name, points=points, repo=args.repo, jobs=args.jobs, keys=args.keys,
          collect_only=args.collect_only)


if __name__ == "__main__":
    main()
