"""Prefect flow of the audit design study: one DVC experiment per (seed, profile) of the DP run, each evaluated
for every design (score x guessing rule, ``study``), rows appended to reports/audit_study/study.json.

    python -m flows.audit_study --phase development    # seeds study.development_seeds x every profile
    python -m flows.audit_study --phase confirmation   # seeds study.confirmation_seeds at the committed
                                                       # profile and design (params.yaml committed, rows final)
    python -m flows.audit_study --phase recipes        # recipe sensitivity at the committed profile (descriptive)

A seed s sets ``canaries.seed`` and ``finetune.seed`` (canary draw, membership coins, text sample, training noise).
Each experiment drops the other runs, runs only the study's attacks and reproduces up to ``audit``; DVC's cache
keeps what points share (upstream stages, and the canaries of a seed across profiles). The flow only orchestrates:
the rows come from ``stages.tools.studies.study``. Confirmation refuses to run while params.yaml differs from the commit
(the design must be committed first) and never rewrites an existing confirmation row.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

if __name__ == "__main__":  # command-line entry: offline Prefect settings before prefect is imported
    from stages.shared.core.prefect_env import apply_offline_defaults

    apply_offline_defaults()

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows.sweep import check_points, committed_metrics, queue_status
from stages.attack.api import threat_model
from stages.audit.params import AuditParams
from stages.finetune.params import load_finetune
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import load, read_params, section_of
from stages.shared.core.vcs import dvc, git_dirty, head
from stages.tools.studies.params import StudyParams
from stages.tools.studies.study import FIELDS, study_rows, summarise

STUDY_FILE = "study.json"


def exp_name(phase: str, seed: int, label: str) -> str:
    return f"study-{phase[:3]}-s{seed}-{label}".replace(".", "p").replace("_", "-")


def point_sets(study, seed: int, run_overrides: dict, drop: list[str]) -> list[str]:
    """The -S overrides of one study experiment (``drop``: the keys it deletes, from ``dropped``)."""
    sets = [f"~{key}" for key in drop]
    sets += [f"attack.attacks=[{','.join(study.attacks)}]", f"canaries.seed={seed}", f"finetune.seed={seed}"]
    for key, value in flat(run_overrides, f"runs.{study.run}"):
        sets.append(f"++{key}={value}")  # add or override: the run entry may not set it yet
    return sets


def dropped(study, raw: dict) -> list[str]:
    """The params keys a study experiment deletes: every other run, and the attack lists and guessing rules that name
    one (the params loader refuses a rule for a run that does not exist), every replica and pooled test."""
    others = [r for r in raw["runs"] if r != study.run]
    keys = [f"runs.{r}" for r in others]
    for section in ("attack.runs", "audit.primary.runs"):
        keys += [f"{section}.{r}" for r in others if r in (section_of(raw, section) or {})]
    # a study point is one run at one seed: no replicas, no pooled test
    keys += [f"replicas.sets.{name}" for name in section_of(raw, "replicas.sets") or {}]
    keys += [f"audit.pooled.{r}" for r in section_of(raw, "audit.pooled") or {}]
    return keys


def flat(d: dict, prefix: str):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, f"{prefix}.{k}")
        else:
            yield f"{prefix}.{k}", v


def committed_profile(study, raw: dict) -> str:
    """The profile whose (batch_size, steps) the committed run uses."""
    ft = load_finetune(study.run, raw=raw)
    for name, p in study.profiles.items():
        if (p["batch_size"], p["steps"]) == (ft.batch_size, ft.steps):
            return name
    raise ConfigError(f"runs.{study.run}: batch_size {ft.batch_size}, steps {ft.steps} match no study.profiles")


def plan(phase: str, study, raw: dict, profiles: list[str] | None = None) -> dict[str, dict]:
    """experiment name -> {seed, profile, recipe, sets} (development: only ``profiles`` when given)."""
    drop = dropped(study, raw)
    points = {}
    if phase == "development":
        for seed in study.development_seeds:
            for name, prof in study.profiles.items():
                if profiles and name not in profiles:
                    continue
                points[exp_name(phase, seed, name)] = {"seed": seed, "profile": name, "recipe": None,
                                                       "sets": point_sets(study, seed, prof, drop)}
    elif phase == "confirmation":
        name = committed_profile(study, raw)
        for seed in study.confirmation_seeds:
            points[exp_name(phase, seed, name)] = {"seed": seed, "profile": name, "recipe": None,
                                                   "sets": point_sets(study, seed, {}, drop)}
    elif phase == "recipes":
        name = committed_profile(study, raw)
        for recipe, over in study.recipes.items():
            points[exp_name(phase, study.recipe_seed, recipe)] = {
                "seed": study.recipe_seed, "profile": name, "recipe": recipe,
                "sets": point_sets(study, study.recipe_seed, over, drop)}
    else:
        raise ConfigError(f"--phase: unknown phase {phase!r} (development, confirmation, recipes)")
    return points


def read_study(out: Path) -> list[dict]:
    f = out / STUDY_FILE
    return json.loads(f.read_text())["rows"] if f.is_file() else []


def write_study(out: Path, rows: list[dict], primary: dict) -> None:
    """study.json (rows and per-design summaries) and study.md, atomically."""
    from stages.shared.core.formatting import Table, fmt, md_table

    out.mkdir(parents=True, exist_ok=True)
    summary = summarise([r for r in rows if r["phase"] != "recipes"])
    data = {"fields": list(FIELDS), "committed_primary": primary, "rows": rows, "summary": summary}
    t = Table(["phase", "profile", "design", "threat model", "seeds", "median ε̂95", "median GDP ε̂95",
               "ideal median", "largest ε̂95", "accountant ε", "valid ppl"])
    for s in summary:
        t.rows.append([s["phase"], s["profile"], s["design"], s["threat_model"], len(s["seeds"]),
                       fmt(s["median_eps_lb_95"]), fmt(s["median_gdp_eps_lb_95"]), fmt(s["median_ideal"]),
                       fmt(s["max_eps_lb_95"]), fmt(s["accountant_epsilon"]),
                       fmt(s["median_valid_perplexity"])])
    rt = Table(["phase", "seed", "profile", "recipe", "design", "r", "v", "ε̂95", "GDP ε̂95", "ideal median",
                "percentile in ideal", "valid ppl", "experiment"])
    for r in rows:
        rt.rows.append([r["phase"], r["seed"], r["profile"], r.get("recipe") or "–", r["design"], r["r"], r["v"],
                        fmt(r["eps_lb_95"]), fmt(r["gdp_eps_lb_95"]), fmt(r["ideal_eps_lb_95_median"]),
                        fmt(r["ideal_percentile"]), fmt(r["valid_perplexity"]),
                        r["experiment"]])
    md = ("# Audit design study\n\nEvery bound is at 95%, uncorrected: development rows are looks that informed the "
          "choice, confirmation rows test the committed design on seeds no earlier experiment used. The ideal is the "
          "median of a heuristic simulation (linear last-iterate model, an ideal white-box statistic) at each run's "
          "own q, T, sigma; a valid audit can exceed it. Recipe rows are descriptive.\n\n"
          f"Committed primary: {primary}\n\n## Summary\n\n" + md_table(t) + "\n\n## Rows\n\n" + md_table(rt) + "\n")
    for name, text in ((STUDY_FILE, json.dumps(data, indent=1, sort_keys=False)), ("study.md", md)):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


@task(name="queue-study-point", cache_policy=NO_CACHE, persist_result=False)
def queue_point(name: str, sets: list[str], repo: str) -> str:
    dvc(repo, "exp", "run", "--queue", "-n", name, *[a for s in sets for a in ("-S", s)], "audit")
    return name


@task(name="run-study-queue", cache_policy=NO_CACHE, persist_result=False, retries=0)
def run_study_queue(repo: str) -> None:
    dvc(repo, "exp", "run", "--run-all", "--jobs", "1")


def experiment_revs(repo: str, baseline: str, names: list[str]) -> dict[str, str]:
    revs = {}
    for entry in json.loads(dvc(repo, "exp", "show", "--json", "--rev", baseline)):
        for exp in entry.get("experiments") or []:
            for rev in exp.get("revs") or []:
                if rev.get("name") in names and not rev.get("error"):  # a failed run is listed with its error
                    revs[rev["name"]] = rev["rev"]
    return revs


@flow(name="leakage-audit-design-study", persist_result=False)
def audit_study(phase: str, repo: str = ".", collect_only: str | None = None,
                profiles: list[str] | None = None, resume: str | None = None) -> list[dict]:
    repo = str(Path(repo).resolve())
    log = get_run_logger()
    raw = read_params(Path(repo) / "params.yaml")
    params = load(AuditParams, "audit", Path(repo) / "params.yaml", raw)
    study = load(StudyParams, "study", Path(repo) / "params.yaml", raw)
    out = Path(repo) / study.out_dir
    rows = read_study(out)
    points = plan(phase, study, raw, profiles)
    if phase == "confirmation":
        if git_dirty(repo, "params.yaml", "studies.yaml"):
            raise ConfigError("params.yaml, studies.yaml: commit the chosen design before any confirmation run")
        done = {r["seed"] for r in rows if r["phase"] == "confirmation"}
        if done & {p["seed"] for p in points.values()}:
            raise ConfigError(f"{out / STUDY_FILE}: confirmation seeds {sorted(done)} already have rows; "
                              "they are never rerun or edited")
    baseline = collect_only or head(repo)
    # resume: points that finished as experiments of an earlier commit are read from there, the rest run at HEAD
    earlier = experiment_revs(repo, resume, list(points)) if resume else {}
    todo = [n for n in points if n not in earlier]
    if earlier:
        log.info("from %s: %s; to run: %s", resume[:8], ", ".join(earlier), ", ".join(todo) or "none")
    if not collect_only:
        check_points(repo, {name: points[name]["sets"] for name in todo})
        for name in todo:
            queue_point(name, points[name]["sets"], repo)
            log.info("queued %s: %s", name, " ".join(points[name]["sets"]))
        run_study_queue(repo)
    status = queue_status(repo)
    failed = {n: status[n] for n in todo if status.get(n, "Success") != "Success"}
    if failed:
        raise RuntimeError("study experiments not finished: " + ", ".join(f"{n} ({s})" for n, s in failed.items()))
    revs = {**earlier, **experiment_revs(repo, baseline, todo)}
    read = committed_metrics(repo)
    new = []
    for name, p in points.items():
        metrics = read(revs[name])
        for row in study_rows(metrics, study, seed=p["seed"], phase=phase, profile=p["profile"], experiment=name,
                              rev=revs[name], trials=params.ceiling.trials, ceiling_seed=params.ceiling.seed,
                              threat_models={s: threat_model(s) for s in study.scores}):
            if phase == "recipes":
                if (row["score"], row["k_pos"], row["k_neg"]) != (params.primary.attack, *params.primary.rule(
                        study.run)):
                    continue
                row["recipe"] = p["recipe"]
            new.append(row)
    keep = [r for r in rows if not (r["phase"] == phase and r["experiment"] in points and phase != "confirmation")]
    primary = {"attack": params.primary.attack, "kind": params.primary.kind,
               "k_pos": params.primary.rule(study.run)[0], "k_neg": params.primary.rule(study.run)[1]}
    write_study(out, keep + new, primary)
    log.info("%s: %d rows for %d experiments -> %s", phase, len(new), len(points), out / STUDY_FILE)
    return new


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phase", required=True, choices=["development", "confirmation", "recipes"])
    ap.add_argument("--repo", default=".")
    ap.add_argument("--collect-only", metavar="COMMIT", help="tabulate this phase's experiments derived from COMMIT")
    ap.add_argument("--profile", action="append", dest="profiles", help="development: only this profile (repeatable)")
    ap.add_argument("--resume", metavar="COMMIT", help="read the points that finished as experiments of COMMIT from "
                    "there and run only the others (at HEAD)")
    args = ap.parse_args(argv)
    audit_study(phase=args.phase, repo=args.repo, collect_only=args.collect_only, profiles=args.profiles,
                resume=args.resume)


if __name__ == "__main__":
    main()
