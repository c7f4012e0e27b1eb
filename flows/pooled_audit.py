"""Record the pooled tests of the reproduced pipeline in reports/audit_study/pooled.json (git-tracked), with the
evidence that the design existed before the runs: the commit since which params.yaml has held the pooled design
unchanged (``design_commit``), the commit the runs were reproduced at, a hash of the resolved params and a copy of
dvc.lock (reports/audit_study/locks/).

    leakaudit run && python -m flows.pooled_audit    # then commit reports/audit_study/ with the dvc.lock it names

Refuses while params.yaml or dvc.lock differ from the commit, or while `dvc status` finds the audit stale; never
rewrites a recorded (recipe, seeds, streams) row. A row whose seeds are all preregistered in params now
(``audit.seeds``) is a confirmation set; otherwise a development look. Each row names the stream derivation its runs
used (``streams``: ``stages.core.seeds.DERIVATION``). The summary gives one bar per design. The flow only
orchestrates: rows come from ``stages.studies.study``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import yaml

from stages.audit.params import PrimaryParams, SeedRegistry, StudyParams
from stages.core.errors import ConfigError
from stages.core.params import build, load, read_params, section_of
from stages.core.vcs import VcsError, dvc, git, git_dirty, head
from stages.studies.study import COUPLED_STREAMS, pooled_row, pooled_summary, same_set

POOLED_FILE = "pooled.json"
#: the rule keys of audit.primary that params files of older commits predate, as absent (no such rule)
RULE_KEYS_ABSENT = {"no_dp": None, "runs": {}}


def _without(d: dict | None, *keys: str) -> dict:
    return {k: v for k, v in (d or {}).items() if k not in keys}


def _rule_of(raw: dict, recipe: str) -> list[int]:
    """[k_pos, k_neg] of the recipe's primary test as the audit reads it (``PrimaryParams.rule``: its own rule, else
    for a recipe without DP ``no_dp``, else the default); DP as the run's params set it (``runs.<recipe>.dp.enabled``,
    else ``finetune.dp.enabled``). Only ``audit.primary`` is built: a params file of any commit whose other sections
    today's schema no longer reads still gives its rule, and one older than a rule key reads as not having that rule."""
    primary = build(PrimaryParams, {**RULE_KEYS_ABSENT, **(section_of(raw, "audit.primary") or {})}, "audit.primary")
    default = (section_of(raw, "finetune.dp") or {}).get("enabled")
    dp = (section_of(raw, f"runs.{recipe}.dp") or {}).get("enabled", default)
    return list(primary.rule(recipe, bool(dp)))


def design_of(raw: dict, recipe: str) -> dict:
    """The recipe's pooled design, seeds left out (a seed is not a design choice: its status is ``audit.seeds``'s,
    dated by ``seeds_commit``): the pooled rule, the primary test (with the recipe's own rule), the replicas' attacks
    and how many replicas of it, the canaries and fine-tune config and the run's own entry."""
    primary = section_of(raw, "audit.primary") or {}
    replicas = section_of(raw, "replicas") or {}
    canaries = section_of(raw, "canaries") or {}
    return {"pooled": (section_of(raw, "audit.pooled") or {}).get(recipe),
            "primary": {**_without(primary, "runs", "no_dp"), "run": _rule_of(raw, recipe)},
            "replicas": {**_without(replicas, "sets"),
                         "count": sum(1 for r in (replicas.get("sets") or {}).values() if r.get("run") == recipe)},
            "canaries": {**_without(canaries, "seed"), "formatted": _without(canaries.get("formatted"), "seed")},
            "finetune": _without(section_of(raw, "finetune"), "seed"),
            "run": _without(section_of(raw, f"runs.{recipe}"), "seed")}


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


def record(repo: str = ".", experiment: str | None = None) -> list[dict]:
    """Append the reproduced pipeline's pooled tests to pooled.json: the workspace's (committed, audit up to date),
    or those of the DVC experiment ``experiment`` (its commit holds params.yaml, dvc.lock and the metrics)."""
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
    f = out / POOLED_FILE
    rows = json.loads(f.read_text())["rows"] if f.is_file() else []
    digest = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()
    new = []
    for recipe, pooled in (metrics.get("pooled") or {}).items():
        streams = pooled.get("streams", COUPLED_STREAMS)  # the derivation the runs' audit recorded
        if any(same_set(r, recipe, pooled["seeds"], streams) for r in rows):
            raise ConfigError(f"{f}: {recipe} at seeds {pooled['seeds']} with {streams} streams is already "
                              "recorded (rows are never rewritten)")
        # the stream derivation in the name: a set rerun under new streams keeps the old row's lock
        lock = f"locks/{recipe}-s{'-'.join(map(str, pooled['seeds']))}-{streams}.lock"
        if (out / lock).exists():
            raise ConfigError(f"{out / lock}: already written (a recorded row names it)")
        (out / "locks").mkdir(parents=True, exist_ok=True)
        (out / lock).write_text(lock_text)
        design = design_commit(repo, recipe, params_commit, raw)
        seeds = seeds_commit(repo, pooled["seeds"], params_commit)
        # registered before the runs: in a commit older than the one holding the results (workspace), or in the
        # experiment's baseline or earlier (an experiment's results live in its own commit)
        before = None not in (design, seeds) and (experiment is not None or params_commit not in (design, seeds))
        new.append(pooled_row(pooled, registry=registry, streams=streams, design_commit=design,
                              seeds_commit=seeds, params_commit=params_commit, experiment=experiment,
                              params_sha256=digest, lock=lock, registered_before=before))
    rows += new
    tmp = out / f".{POOLED_FILE}.tmp"
    tmp.write_text(json.dumps({"rows": rows, "summary": pooled_summary(rows, registry)}, indent=1))
    tmp.replace(f)
    return new


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--exp", default=None, help="record the pooled tests of this DVC experiment instead of the "
                                                "workspace's (its baseline is the params commit)")
    args = ap.parse_args(argv)
    for row in record(args.repo, args.exp):
        print(f"{row['phase']}: {row['recipe']} over {len(row['runs'])} runs (seeds {row['seeds']}): {row['v']} of "
              f"{row['r']} right, eps-hat95 {row['eps_lb_95']:.3f} (design since {row['design_commit'][:10]})")


if __name__ == "__main__":
    main()
