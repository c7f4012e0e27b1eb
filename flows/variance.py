"""Prefect flow of the empirical-privacy-variance sweep (empirical-privacy-variance sections 3-5), fanned out
on Dask through prefect-dask.

    leakaudit variance            # = python -m flows.variance: the `variance.sweep` grid of params.yaml

Each point is one (epsilon, b, T, eta, seed): a DVC experiment whose `runs` is that single DP fine-tune (sigma
calibrated by the accountant to the point's epsilon). No point assumes a filesystem shared with the driver:

1. the driver pushes the commit it stands on to a git remote and its cached outputs (the shared upstream
   stages among them) to a DVC remote (local defaults: a bare repo and a directory under `variance.sweep.work_dir`);
2. a Dask worker clones the git remote into its own directory, points DVC at the remote, writes the point's
   params, runs `dvc exp run --pull <targets>` (unchanged upstream stages are pulled, not recomputed) and
   `dvc exp push`es the experiment (git refs to the git remote, outputs to the DVC remote);
3. the driver `dvc exp pull`s every finished experiment and tabulates it from the experiment's own commit
   (reports/metrics.json), writing the sweep table `variance.table` that the `variance` DVC stage analyses.

A failing point (a stage error, divergence, a lost worker) is retried `variance.sweep.retries` times, then recorded
as failed with its error. `--study` trains the pre-registered study (`variance.study`), `--study silent` the second.

The flow only orchestrates: the grid, a point's params, the divergence rule and the table's rows come from
``stages.variance.api``; every point's params are validated by the root params loader before any is dispatched.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

if __name__ == "__main__":  # command-line entry: offline Prefect settings before prefect is imported
    from stages.shared.core.prefect_env import apply_offline_defaults

    apply_offline_defaults()

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.runtime.api_server import shared_api
from stages.params import Params, load_params, validate_params
from stages.shared.core.env import OFFLINE_ENV
from stages.shared.core.errors import ConfigError, DataError
from stages.shared.core.params import read_params
from stages.shared.core.vcs import dvc, git
from stages.variance.api import (
    RUN,
    apply_point,
    diverged,
    markdown,
    point_params,
    points,
    study_points,
    study_record,
    tabulate,
)
from stages.variance.params import SweepParams
from stages.variance.schema import read_audit_points, read_point_refs, write_audit_points, write_points

ENV = {**OFFLINE_ENV,
       "GIT_AUTHOR_NAME": "leakaudit-sweep", "GIT_AUTHOR_EMAIL": "sweep@leakaudit.invalid",
       "GIT_COMMITTER_NAME": "leakaudit-sweep", "GIT_COMMITTER_EMAIL": "sweep@leakaudit.invalid"}


def sh(tool: Callable[..., str], cwd: str | Path, *args: str, env: dict | None = None) -> str:
    """``tool`` (``stages.shared.core.vcs.git`` or ``dvc``) in ``cwd`` with the sweep's environment (``ENV``, then
    ``env``)."""
    return tool(cwd, *args, env={**ENV, **(env or {})})


def checked_points(params_file: Path) -> tuple[Params, list[dict]]:
    """The root params and the grid's points, every point's params (the file's, with the point's run and attacks)
    validated before any is dispatched: a bad point is a one-line ConfigError naming it and the key."""
    raw = read_params(params_file)
    params = load_params(params_file, raw)
    pts = points(params.variance.sweep)
    for p in pts:
        validate_params(point_params(raw, p), f"{params_file} with variance point {p['point']}")
    return params, pts


@task(name="sweep-point", cache_policy=NO_CACHE, persist_result=False)
def run_point(point: dict, git_remote: str, dvc_remote: str, rev: str, targets: list[str],
              worker_dir: str | None, threads: int, keep: bool) -> dict:
    """One point on a Dask worker, in a fresh clone of the git remote: experiment run and pushed back.
    Returns the point's name, experiment commit and wall seconds (results travel through the remotes)."""
    t0 = time.time()
    if worker_dir:
        Path(worker_dir).mkdir(parents=True, exist_ok=True)
    clone = Path(tempfile.mkdtemp(prefix=point["point"] + "-", dir=worker_dir))
    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    phases: dict[str, float] = {}

    def phase(name: str, tool: Callable[..., str], cwd: Path, *args: str, **kw) -> str:
        t = time.time()
        out = sh(tool, cwd, *args, **kw)
        phases[name] = phases.get(name, 0.0) + time.time() - t
        return out

    try:
        phase("clone", git, clone.parent, "clone", "--quiet", git_remote, str(clone))
        phase("clone", git, clone, "checkout", "--quiet", rev)
        phase("clone", dvc, clone, "remote", "add", "--local", "--default", "--force", "sweep", dvc_remote)
        apply_point(clone / "params.yaml", point)
        phase("experiment", dvc, clone, "exp", "run", "--pull", "--name", point["point"], *targets, env=env)
        phase("push", dvc, clone, "exp", "push", "origin", point["point"])
        exp_rev = sh(git, clone, "rev-parse", exp_ref(rev, point["point"])).strip()
        get_run_logger().info("point %s: %s", point["point"], ", ".join(f"{k} {v:.0f} s" for k, v in phases.items()))
        return {"point": point["point"], "rev": exp_rev, "seconds": time.time() - t0, "phases": phases,
                "worker_cwd": os.getcwd(), "clone": str(clone)}
    finally:
        if not keep:
            shutil.rmtree(clone, ignore_errors=True)


def remotes(repo: Path, sp: SweepParams) -> tuple[str, str]:
    """The git and DVC remotes: the params' URLs, or the local defaults under work_dir."""
    work = (repo / sp.work_dir).resolve()
    return sp.git_remote or str(work / "remote.git"), sp.dvc_remote or str(work / "dvc-remote")


def setup_remotes(repo: Path, sp: SweepParams) -> tuple[str, str, str]:
    """The git and DVC remotes the workers read and write (created under work_dir when not given), the commit
    pushed to the git remote, and the cached outputs pushed to the DVC remote."""
    git_remote, dvc_remote = remotes(repo, sp)
    if not sp.git_remote and not (Path(git_remote) / "HEAD").exists():
        Path(git_remote).mkdir(parents=True, exist_ok=True)
        sh(git, repo, "init", "--quiet", "--bare", git_remote)
    if not sp.dvc_remote:
        Path(dvc_remote).mkdir(parents=True, exist_ok=True)
    if sh(git, repo, "status", "--porcelain", "--untracked-files=no").strip():
        raise RuntimeError(f"{repo}: uncommitted changes: the points run the committed HEAD (commit first)")
    rev = sh(git, repo, "rev-parse", "HEAD").strip()
    sh(git, repo, "push", "--quiet", "--force", git_remote, f"{rev}:refs/heads/sweep-{sp.name}")
    sh(dvc, repo, "remote", "add", "--local", "--force", "sweep", dvc_remote)
    # every cached output dvc.lock names: the shared upstream the points pull, and the rest (an experiment loads
    # every output of dvc.lock when it commits)
    sh(dvc, repo, "push", "--remote", "sweep")
    return git_remote, dvc_remote, rev


def task_runner(sp: SweepParams):
    from prefect_dask import DaskTaskRunner

    if sp.cluster.address:
        return DaskTaskRunner(address=sp.cluster.address)
    return DaskTaskRunner(cluster_kwargs={"n_workers": sp.cluster.workers, "processes": True,
                                          "threads_per_worker": 1, "dashboard_address": None})


def exp_ref(rev: str, name: str) -> str:
    """The full ref of experiment ``name`` on base commit ``rev`` (a bare name is ambiguous once an earlier sweep
    on another commit used it)."""
    return f"refs/exps/{rev[:2]}/{rev[2:]}/{name}"


def finished(futures: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Any, str | None]]:
    """Each (key, Prefect future) once its state is final (only after ``wait()``), in the order given: (key, the
    task's result, None) when it completed, else (key, None, why): the failure after the task's retries (500
    characters at most), or "not run". Any failure of a point is recorded, never fatal."""
    for key, fut in futures:
        fut.wait()
        if fut.state.is_completed():
            yield key, fut.result(), None
            continue
        try:
            fut.result(raise_on_failure=True)
            why = "not run"
        except BaseException as exc:  # noqa: BLE001 - any failure of a point is recorded, never fatal
            why = " ".join(str(exc).split())[:500] or type(exc).__name__
        yield key, None, why


def collect(repo: Path, git_remote: str, rev: str, done: dict[str, dict], failed: dict[str, str], pts: list[dict],
            params: Params) -> list[dict]:
    """Pull the finished experiments' refs and tabulate every point from its experiment's metrics."""
    if done:
        sh(dvc, repo, "exp", "pull", "--no-cache", "--force", git_remote, *[exp_ref(rev, n) for n in done])

    def read_run(exp_rev: str) -> dict:
        return json.loads(sh(git, repo, "show", f"{exp_rev}:reports/metrics.json"))["runs"][RUN]

    vp = params.variance
    return tabulate(pts, done, failed, read_run, vp.measure, vp.sweep.diverged_loss, params.audit.primary.confidences)


@flow(name="privacy-variance-sweep", persist_result=False)
def variance_sweep(repo: str = ".", params_file: str = "params.yaml") -> list[dict]:
    """Run the `variance.sweep` grid as DVC experiments on Dask workers; write the sweep table (the task runner
    comes from the params: use `run_sweep`)."""
    log = get_run_logger()
    root = Path(repo).resolve()
    params, pts = checked_points(root / params_file)
    vp, sp = params.variance, params.variance.sweep
    git_remote, dvc_remote, rev = setup_remotes(root, sp)
    log.info("sweep %s: %d points from commit %s; git remote %s, DVC remote %s", sp.name, len(pts), rev[:8],
             git_remote, dvc_remote)
    point_task = run_point.with_options(retries=sp.retries, retry_delay_seconds=1)
    futures = {p["point"]: point_task.submit(p, git_remote, dvc_remote, rev, list(sp.targets), sp.worker_dir,
                                             sp.cluster.threads_per_worker, sp.keep_clones) for p in pts}
    done, failed = {}, {}
    for name, result, why in finished(futures.items()):
        if why is None:
            done[name] = result
            log.info("point %s: done in %.0f s (experiment %s; worker cwd %s, clone %s)", name, result["seconds"],
                     result["rev"][:8], result["worker_cwd"], result["clone"])
        else:
            failed[name] = why
            log.warning("point %s: FAILED after %d retries: %s", name, sp.retries, why)
    rows = collect(root, git_remote, rev, done, failed, pts, params)
    write_points(root / vp.table, rows, {"sweep": sp.name, "base_commit": rev, "params": asdict(sp)})
    md = markdown(rows, sp.name, rev, params.audit.primary.confidences)
    create_markdown_artifact(key=f"variance-{sp.name}".lower().replace("_", "-"), markdown=md,
                             description=f"empirical privacy variance sweep {sp.name}")
    return rows


#: the pre-registered studies the flow trains: ``--study NAME`` -> the ``variance.NAME`` section
STUDIES = ("study", "silent")


def checked_study(params_file: Path, which: str = "study") -> tuple[Params, dict, list[dict]]:
    """The root params, the raw params and a pre-registered study's models (``variance.<which>``): the study must be
    registered (its recipe a run, its seeds fresh: ``registered``) and every model's params valid, before any model
    is trained."""
    raw = read_params(params_file)
    params = load_params(params_file, raw)
    study = getattr(params.variance, which)
    problems = study.registered(raw)
    if problems:
        key, why = problems[0]
        raise ConfigError(f"{params_file}: {key}: {why}")
    pts = study_points(study, raw, params.audit.primary.attack)
    for p in pts:
        validate_params(point_params(raw, p), f"{params_file} with study model {p['point']}")
    return params, raw, pts


def study_meta(params: Params, raw: dict, which: str = "study") -> dict:
    """What the study table says produced it: the registered study and the recipe it varies (compared on resume)."""
    study = getattr(params.variance, which)
    return {"study": json.loads(json.dumps(asdict(study))), "recipe": raw["runs"][study.run],
            "primary": {"attack": params.audit.primary.attack, "kind": params.audit.primary.kind}}


def kept_models(path: Path, meta: dict) -> dict[str, dict]:
    """The completed models of an earlier (interrupted) run of the same study; a table of another design is refused
    (the design is fixed before the first model: it never changes under a table that has models)."""
    if not path.is_file():
        return {}
    rows, old = read_audit_points(path)
    if old != meta:
        raise DataError(f"{path}: written for another study design or recipe than variance.study now; the "
                        "registered design never changes once models exist (move the table away to start over)")
    return {r["point"]: r for r in rows if r["status"] == "completed"}


@flow(name="privacy-variance-study", persist_result=False)
def variance_study(repo: str = ".", params_file: str = "params.yaml", which: str = "study") -> list[dict]:
    """Train the pre-registered study's models (configurations x seeds) as DVC experiments on Dask workers, through
    the sweep's machinery (``variance.sweep``: cluster, retries, remotes). The table (``variance.study.table``) is
    rewritten as each model completes, so an interrupted study resumes: its completed models are kept and only the
    others run (from the commit now checked out, which each row names)."""
    log = get_run_logger()
    root = Path(repo).resolve()
    params, raw, pts = checked_study(root / params_file, which)
    study, sp = getattr(params.variance, which), params.variance.sweep
    path, meta = root / study.table, study_meta(params, raw, which)
    kept = kept_models(path, meta)
    todo = [p for p in pts if p["point"] not in kept]
    log.info("study: %d models, %d completed earlier, %d to train", len(pts), len(kept), len(todo))
    rows = dict(kept)

    def write() -> None:
        write_audit_points(path, [rows[p["point"]] for p in pts if p["point"] in rows], meta)

    if not todo:
        write()
        return list(rows.values())
    git_remote, dvc_remote, rev = setup_remotes(root, sp)
    point_task = run_point.with_options(retries=sp.retries, retry_delay_seconds=1)
    futures = {point_task.submit(p, git_remote, dvc_remote, rev, ["audit"], sp.worker_dir,
                                 sp.cluster.threads_per_worker, sp.keep_clones): p for p in todo}
    from prefect.futures import as_completed

    for p, done, why in finished((futures[fut], fut) for fut in as_completed(list(futures))):
        if why is None:
            sh(dvc, root, "exp", "pull", "--no-cache", "--force", git_remote, exp_ref(rev, p["point"]))
            run = json.loads(sh(git, root, "show", f"{done['rev']}:reports/metrics.json"))["runs"][study.run]
            why = diverged(run, sp.diverged_loss)
            rows[p["point"]] = study_record(p, run, "failed" if why else "completed", why, done, rev)
            log.info("model %s: %s in %.0f s (experiment %s)", p["point"], rows[p["point"]]["status"],
                     done["seconds"], done["rev"][:8])
        else:
            rows[p["point"]] = study_record(p, None, "failed", why, None, rev)
            log.warning("model %s: FAILED after %d retries: %s", p["point"], sp.retries, why)
        write()
    return [rows[p["point"]] for p in pts]


def write_plan(repo: str = ".", params_file: str = "params.yaml") -> dict:
    """The second study's power statement (``stages.variance.paired.plan``) at the recipe's candidate pool and
    primary rule as the committed metrics give them, into ``variance.silent.plan``."""
    from stages.shared.core.io import write_json
    from stages.variance.api import plan

    params, raw, _ = checked_study(Path(repo) / params_file, "silent")
    study = params.variance.silent
    run = json.loads((Path(repo) / params.audit.out).read_text())["runs"][study.run]
    prim = run["audit_primary"]
    out = plan(study, run["training"]["n_population"], prim["m"],
               (prim["k_pos"], prim["k_neg"]), run["privacy"]["accountant"])
    write_json(Path(repo) / study.plan, {"study": study_meta(params, raw, "silent")["study"], **out})
    return out


def run_sweep(repo: str = ".", params_file: str = "params.yaml") -> list[dict]:
    """The flow on the task runner `variance.sweep.cluster` asks for (a LocalCluster or a scheduler address),
    driver and workers reporting to one Prefect API."""
    params, _ = checked_points(Path(repo) / params_file)  # a bad point fails here, before any server or worker
    with shared_api():
        return variance_sweep.with_options(task_runner=task_runner(params.variance.sweep))(repo=repo,
                                                                                           params_file=params_file)


def run_study(repo: str = ".", params_file: str = "params.yaml", which: str = "study") -> list[dict]:
    """A study's flow on the sweep's task runner (``variance.sweep.cluster``), one Prefect API for all."""
    params, _, _ = checked_study(Path(repo) / params_file, which)  # an unregistered study fails here, before any worker
    with shared_api():
        return variance_study.with_options(task_runner=task_runner(params.variance.sweep))(
            repo=repo, params_file=params_file, which=which)


def retabulate(repo: str = ".", params_file: str = "params.yaml") -> list[dict]:
    """Rebuild the sweep table from the experiments it already names (e.g. after the table's schema gained a
    column): the same points, experiment commits and failures, no point rerun."""
    root = Path(repo).resolve()
    params, pts = checked_points(root / params_file)
    vp, sp = params.variance, params.variance.sweep
    old, meta = read_point_refs(root / vp.table)
    if meta.get("sweep") != sp.name or [r["point"] for r in old] != [p["point"] for p in pts]:
        raise DataError(f"{vp.table}: sweep {meta.get('sweep')!r} is not variance.sweep {sp.name!r} with this grid")
    done = {r["point"]: {"rev": r["rev"]} for r in old if r["rev"]}
    failed = {r["point"]: r["error"] for r in old if not r["rev"]}
    rows = collect(root, remotes(root, sp)[0], meta["base_commit"], done, failed, pts, params)
    write_points(root / vp.table, rows, meta)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--plan", action="store_true",
                    help="with --study silent: write its power statement (variance.silent.plan) and stop")
    ap.add_argument("--retabulate", action="store_true",
                    help="rebuild the table from the experiments it names (no point reruns)")
    ap.add_argument("--study", nargs="?", const="study", default=None, choices=STUDIES,
                    help="train a pre-registered study (variance.study; --study silent: variance.silent) instead of "
                         "the sweep grid; resumable")
    args = ap.parse_args(argv)
    t0 = time.time()
    if args.plan:
        print(json.dumps(write_plan(args.repo, args.params), indent=1))
        return
    if args.study:
        rows = run_study(args.repo, args.params, args.study)
        ok = sum(r["status"] == "completed" for r in rows)
        print(f"variance study: {ok} of {len(rows)} models completed in {time.time() - t0:.0f} s; "
              "`dvc repro report` analyses the table")
        return
    if args.retabulate:
        rows = retabulate(args.repo, args.params)
        print(f"variance table rebuilt from {sum(bool(r['rev']) for r in rows)} experiments")
        return
    rows = run_sweep(args.repo, args.params)
    ok = sum(r["status"] == "completed" for r in rows)
    print(f"variance sweep: {ok} of {len(rows)} points completed in {time.time() - t0:.0f} s; "
          "`dvc repro report` analyses the table")


if __name__ == "__main__":
    from stages.shared.core.cli import run_cli

    run_cli(main)
