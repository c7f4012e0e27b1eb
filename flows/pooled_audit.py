"""Record the reproduced pipeline's runs in the seed ledger (reports/audit_study/seed_ledger.json: every run of a
seed set, its design, streams and result; the only writer of that file) and its pooled tests new to
reports/audit_study/pooled.json (git-tracked), with the evidence that the design existed before the runs: the commit
since which params.yaml has held the pooled design unchanged (``design_commit``), the commit the runs were
reproduced at, a hash of the resolved params and a copy of dvc.lock (reports/audit_study/locks/).

    leakaudit run && git commit ... && python -m flows.pooled_audit
    dvc repro audit report      # the audit reads the ledger (the recorded set's status does not change)

Refuses while params.yaml or dvc.lock differ from the commit, or while `dvc status` finds the audit stale, or when the
runs of that commit are recorded already; never rewrites a recorded (recipe, seeds, streams) row. Each row's status
is the ledger's (``ledger_status``, stages/audit/ledger.py: a set is a confirmation for the one design its first
recorded run was under). Each row names the stream derivation its runs used (``streams``:
``stages.shared.core.seeds.DERIVATION``). The summary gives one bar per design. The flow only orchestrates: rows come
from
``stages.tools.studies.study``, statuses from the ledger.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import yaml

from stages.audit.api import Ledger, LedgerEntry, design_key, design_of, read_ledger, user_test_name, write_ledger
from stages.audit.params import SeedRegistry
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import load, read_params, section_of
from stages.shared.core.vcs import VcsError, dvc, git, git_dirty, head
from stages.tools.studies.params import StudyParams
from stages.tools.studies.study import COUPLED_STREAMS, pooled_row, pooled_summary, same_set

POOLED_FILE = "pooled.json"


def _history(repo: str, rev: str):
    """(commit, params.yaml at it) from ``rev`` back, newest first, while params.yaml exists; ``rev`` itself first
    (whether or not it changed params.yaml), then each earlier commit that changed it."""
    commits = git(repo, "log", "--format=%H", rev, "--", "params.yaml").split()
    top = git(repo, "rev-parse", rev).strip()
    for commit in ([top] if commits[:1] != [top] else []) + commits:
        try:
            yield commit, yaml.safe_load(git(repo, "show", f"{commit}:params.yaml"))
        except VcsError:
            return


def design_commit(repo: str, recipe: str, rev: str = "HEAD", raw: dict | None = None) -> str | None:
    """The oldest commit since which params.yaml's pooled design of ``recipe`` has not changed up to ``rev``: that
    of ``rev`` itself, or of ``raw`` (an experiment's params); None when ``rev`` does not hold that design."""
    now = design_of(raw if raw is not None else yaml.safe_load(git(repo, "show", f"{rev}:params.yaml")), recipe)
    found = None
    for commit, old in _history(repo, rev):
        try:
            if design_of(old, recipe) != now:
                break
        except ConfigError:  # an audit.primary today's PrimaryParams cannot read: another design
            break
        found = commit
    return found


def seeds_commit(repo: str, seeds: list[int], rev: str = "HEAD") -> str | None:
    """The oldest commit since which every seed in ``seeds`` has stood in ``audit.seeds.preregistered`` (up to
    ``rev``); None if they do not stand there at ``rev``."""
    found = None
    for commit, raw in _history(repo, rev):
        if not set(seeds) <= set(section_of(raw, "audit.seeds.preregistered") or []):
            break
        found = commit
    return found


def _experiment_commit(repo: str, name: str) -> tuple[str, str]:
    """(experiment commit, its baseline commit) of the DVC experiment ``name`` (``refs/exps/...``)."""
    refs = [line.split() for line in git(repo, "for-each-ref", "--format=%(objectname) %(refname)",
                                         "refs/exps").splitlines()]
    found = [sha for sha, ref in refs if ref.rsplit("/", 1)[-1] == name]
    if len(found) != 1:
        raise ConfigError(f"--exp {name}: {'no' if not found else 'more than one'} DVC experiment of that name "
                          "(`dvc exp list` shows them)")
    return found[0], git(repo, "rev-parse", f"{found[0]}^").strip()


def _registered_before(repo: str, seeds, params_commit: str, experiment: str | None) -> tuple[str | None, bool]:
    """(seeds_commit, whether the seeds stood in audit.seeds.preregistered before the runs): in a commit older than
    the one holding the results (workspace), or in the experiment's baseline or earlier (an experiment's results
    live in its own commit)."""
    seeds_at = seeds_commit(repo, list(seeds), params_commit)
    return seeds_at, seeds_at is not None and (experiment is not None or seeds_at != params_commit)


def _design(raw: dict, recipe: str, repo: str, rev: str) -> str:
    """The recipe's design key in ``raw``; a params file today's schema cannot read is a design of its own."""
    try:
        return design_key(raw, recipe)
    except ConfigError:
        return f"unreadable params at {rev}"


def _result(test: dict) -> dict:
    return {"m": test["m"], "r": test["r"], "v": test["v"], "eps_lb_95": test.get("eps_lb_95"),
            **({"single_v": [s["v"] for s in test["single_runs"]]} if test.get("single_runs") else {})}


def entries_of(repo: str, metrics: dict, raw: dict, params_commit: str, experiment: str | None, source: str,
               locks: dict | None = None) -> list[LedgerEntry]:
    """The ledger entries of one reproduced pipeline's metrics: each pooled test, and each run with a primary test
    that no pooled test holds (its seeds: canaries.seed and its own; its streams: the derivation the audit names, or
    for metrics older than that name, the one its pooled tests recorded: one code ran them all)."""
    out, pooled_runs = [], set()
    for recipe, test in (metrics.get("pooled") or {}).items():
        pooled_runs |= set(test["runs"])
        seeds_at, before = _registered_before(repo, test["seeds"], params_commit, experiment)
        out.append(LedgerEntry(
            recipe=recipe, runs=tuple(test["runs"]), seeds=tuple(sorted(test["seeds"])),
            design=test.get("design") or _design(raw, recipe, repo, params_commit),
            streams=test.get("streams", COUPLED_STREAMS), params_commit=params_commit, registered_before=before,
            result=_result(test), source=(locks or {}).get(recipe, source),
            design_commit=design_commit(repo, recipe, params_commit, raw), experiment=experiment))
    for run, res in (metrics.get("runs") or {}).items():
        u = res.get("audit_user")  # the user-level test over canary users: an entry of its own, the run's design
        if u and u.get("seeds"):
            out.append(LedgerEntry(
                recipe=user_test_name(run), runs=(run,), seeds=tuple(sorted(u["seeds"])), design=u["design"],
                streams=section_of(metrics, "audit_params.seeds.streams"), params_commit=params_commit,
                registered_before=_registered_before(repo, u["seeds"], params_commit, experiment)[1],
                result=_result(u), source=source, design_commit=design_commit(repo, run, params_commit, raw),
                experiment=experiment))
        p = res.get("audit_primary")
        if not p or run in pooled_runs or not p.get("seeds"):
            continue
        seeds_at, before = _registered_before(repo, p["seeds"], params_commit, experiment)
        out.append(LedgerEntry(
            recipe=run, runs=(run,), seeds=tuple(sorted(p["seeds"])),
            design=p.get("design") or _design(raw, run, repo, params_commit),
            streams=section_of(metrics, "audit_params.seeds.streams") or next(
                (t["streams"] for t in (metrics.get("pooled") or {}).values() if t.get("streams")), COUPLED_STREAMS),
            params_commit=params_commit, registered_before=before, result=_result(p), source=source,
            design_commit=design_commit(repo, run, params_commit, raw), experiment=experiment))
    return out


def relabel(rows: list[dict], ledger: Ledger, registry) -> list[dict]:
    """Every pooled.json row with the ledger's status of its set now (``ledger_status``); nothing else changes."""
    out = []
    for r in rows:
        streams = r.get("streams", COUPLED_STREAMS)
        mine = [e for e in ledger.entries if (e.recipe, sorted(e.seeds), e.streams, e.params_commit)
                == (r["recipe"], sorted(r["seeds"]), streams, r["params_commit"])]
        design = r.get("design") or (mine[0].design if mine else None)
        status = ledger.status(r["recipe"], r["seeds"], design, streams, registry).value if design else "development"
        out.append({**r, "design": design, "ledger_status": status})
    return out


def _write_json(f: Path, data: dict) -> None:
    tmp = f.with_name(f".{f.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(f)


def record(repo: str = ".", experiment: str | None = None) -> list[dict]:
    """Append the reproduced pipeline's runs to the seed ledger, and its pooled tests new to pooled.json: the
    workspace's (committed, audit up to date), or those of the DVC experiment ``experiment`` (its commit holds
    params.yaml, dvc.lock and the metrics). A pooled set already in pooled.json (same recipe, seeds and streams) gets
    a ledger entry and no new row (a reproduction; rows are never rewritten)."""
    repo = str(Path(repo).resolve())
    if experiment is None:
        if git_dirty(repo, "params.yaml", "dvc.lock"):
            raise ConfigError("params.yaml, dvc.lock: commit the reproduced state before recording its pooled tests")
        status = dvc(repo, "status", "audit")
        if "up to date" not in status:
            raise ConfigError("dvc.lock: the audit is stale (`dvc repro` first): " + status.strip().splitlines()[0])
        rev = params_commit = head(repo)
    else:  # an experiment's commit is what `dvc exp run` reproduced: its lock is up to date by construction
        rev, params_commit = _experiment_commit(repo, experiment)
    params_text = git(repo, "show", f"{rev}:params.yaml")
    lock_text = git(repo, "show", f"{rev}:dvc.lock")
    raw = yaml.safe_load(params_text)
    work = read_params(Path(repo) / "params.yaml")  # where the record goes: the workspace's study folder
    metrics = json.loads(git(repo, "show", f"{rev}:{section_of(raw, 'audit.out')}"))
    out = Path(repo) / load(StudyParams, "study", Path(repo) / "params.yaml", work).out_dir
    registry = load(SeedRegistry, "audit.seeds", Path(repo) / "params.yaml", work)  # the seeds' status now
    ledger_path = Path(repo) / registry.ledger
    ledger = read_ledger(ledger_path)
    if any(e.params_commit == params_commit and e.experiment == experiment for e in ledger.entries):
        raise ConfigError(f"{registry.ledger}: the runs reproduced at {params_commit[:10]}"
                          + (f" (experiment {experiment})" if experiment else "") + " are already recorded")
    f = out / POOLED_FILE
    rows = json.loads(f.read_text())["rows"] if f.is_file() else []
    digest = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()
    new, locks = [], {}
    for recipe, pooled in (metrics.get("pooled") or {}).items():
        streams = pooled.get("streams", COUPLED_STREAMS)  # the derivation the runs' audit recorded
        # the stream derivation and the params commit in the name: every recorded run keeps its own lock
        lock = f"locks/{recipe}-s{'-'.join(map(str, pooled['seeds']))}-{streams}-{params_commit[:10]}.lock"
        (out / "locks").mkdir(parents=True, exist_ok=True)
        (out / lock).write_text(lock_text)
        locks[recipe] = f"{registry.ledger.rsplit('/', 1)[0]}/{lock}"
        design = pooled.get("design") or design_key(raw, recipe)
        status = ledger.status(recipe, pooled["seeds"], design, streams, registry)
        if any(same_set(r, recipe, pooled["seeds"], streams) for r in rows):
            continue  # a reproduction of a recorded set: the ledger entry below, no second row
        seeds_at, _ = _registered_before(repo, pooled["seeds"], params_commit, experiment)
        new.append(pooled_row(pooled, status=status.value, streams=streams, design=design,
                              design_commit=design_commit(repo, recipe, params_commit, raw), seeds_commit=seeds_at,
                              params_commit=params_commit, experiment=experiment, params_sha256=digest, lock=lock))
    ledger = ledger.appended(*entries_of(repo, metrics, raw, params_commit, experiment,
                                         source=f"{section_of(raw, 'audit.out')} at {params_commit[:10]}"
                                         + (f" (experiment {experiment})" if experiment else ""), locks=locks))
    rows = relabel(rows + new, ledger, registry)
    write_ledger(ledger_path, ledger)
    _write_json(f, {"rows": rows, "summary": pooled_summary(rows)})
    return new


def _metrics_history(repo: str, metrics_path: str) -> list[str]:
    """The commits that changed ``metrics_path``, oldest first."""
    return git(repo, "log", "--reverse", "--format=%H", "--", metrics_path).split()


def init_ledger(repo: str = ".") -> Ledger:
    """Build the first ledger from what the code recorded before it existed: every commit of reports/metrics.json
    (a reproduced pipeline's pooled and single-run primary tests, with the params.yaml of that commit) and every
    pooled.json row of a DVC experiment (its metrics lived in the experiment's own commit), in history order. The same
    result committed again (same recipe, seeds, design, streams and counts) is one run. Runs whose metrics name no seeds
    (before seeds were recorded) are left out: their seeds (0-4, ...) are development seeds. Refuses where a ledger
    exists (it is append-only)."""
    repo = str(Path(repo).resolve())
    work = read_params(Path(repo) / "params.yaml")
    registry = load(SeedRegistry, "audit.seeds", Path(repo) / "params.yaml", work)
    path = Path(repo) / registry.ledger
    if path.exists():
        raise ConfigError(f"{registry.ledger}: a ledger exists (it is append-only; record() appends to it)")
    out = Path(repo) / load(StudyParams, "study", Path(repo) / "params.yaml", work).out_dir
    rows = json.loads((out / POOLED_FILE).read_text())["rows"]
    order = {c: i for i, c in enumerate(git(repo, "log", "--reverse", "--format=%H").split())}
    found: list[tuple[int, LedgerEntry]] = []
    metrics_path = section_of(work, "audit.out")
    for commit in _metrics_history(repo, metrics_path):
        try:
            metrics = json.loads(git(repo, "show", f"{commit}:{metrics_path}"))
            raw = yaml.safe_load(git(repo, "show", f"{commit}:params.yaml"))
        except (VcsError, json.JSONDecodeError):
            continue
        for e in entries_of(repo, metrics, raw, commit, None, source=f"{metrics_path} at {commit[:10]}"):
            found.append((order[commit], e))
    for r in rows:
        if r.get("experiment"):
            raw = yaml.safe_load(git(repo, "show", f"{r['params_commit']}:params.yaml"))
            seeds_at, before = _registered_before(repo, r["seeds"], r["params_commit"], r["experiment"])
            found.append((order[r["params_commit"]], LedgerEntry(
                recipe=r["recipe"], runs=tuple(r["runs"]), seeds=tuple(sorted(r["seeds"])),
                design=_design(raw, r["recipe"], repo, r["params_commit"]), streams=r.get("streams", COUPLED_STREAMS),
                params_commit=r["params_commit"], registered_before=before, result=_result(r),
                source=f"{out.name}/{r['lock']}", design_commit=r.get("design_commit"),
                experiment=r["experiment"])))
    entries: list[LedgerEntry] = []
    for _, e in sorted(found, key=lambda x: x[0]):
        same = [x for x in entries if (x.recipe, x.seeds, x.streams, x.design, x.result)
                == (e.recipe, e.seeds, e.streams, e.design, e.result)]
        if not same:
            entries.append(e)
    ledger = Ledger(tuple(entries))
    write_ledger(path, ledger)
    rows = relabel(rows, ledger, registry)
    _write_json(out / POOLED_FILE, {"rows": rows, "summary": pooled_summary(rows)})
    return ledger


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--exp", default=None, help="record the pooled tests of this DVC experiment instead of the "
                                                "workspace's (its baseline is the params commit)")
    ap.add_argument("--init-ledger", action="store_true", help="build the seed ledger from the git history of the "
                    "metrics and the recorded pooled rows (once: refused where a ledger exists)")
    args = ap.parse_args(argv)
    if args.init_ledger:
        ledger = init_ledger(args.repo)
        print(f"seed ledger: {len(ledger.entries)} recorded runs")
        return
    for row in record(args.repo, args.exp):
        print(f"{row['ledger_status']}: {row['recipe']} over {len(row['runs'])} runs (seeds {row['seeds']}): "
              f"{row['v']} of {row['r']} right, eps-hat95 {row['eps_lb_95']:.3f} "
              f"(design since {(row['design_commit'] or '?')[:10]})")


if __name__ == "__main__":
    main()
