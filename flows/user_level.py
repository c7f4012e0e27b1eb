"""The user-level comparison (studies.yaml ``user_level``): example-level DP-SGD, user-level DP-SGD and the non-DP run
at one (epsilon, delta, q, T), each trained on the new-token canaries and the audit users and audited at the example
level and at the user level, run as DVC experiments; its table is ``report.user_level`` (reports/user_level.json,
git-tracked; the report shows it).

    python -m flows.user_level --run --k 4 --seed 3401   # experiment user-level-k4-s3401 (about 20 min), the table
    python -m flows.user_level                           # the table from the experiments already run

Orchestration only: the recipe is presets/user_level.args, the design studies.yaml ``user_level`` (committed before
any run: its plan, reports/user_level_plan.json), the rows ``stages.tools.studies.user_level.comparison_rows``. Each
experiment's runs are recorded in the seed ledger (``flows.pooled_audit.record``), so a seed set confirms only the
design it first ran under. The plan's prediction is stated beside the rows, never fitted to them.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml

from flows.runtime.experiments import carried, experiment_commits, keep_records, preset_lines, write_table
from stages.audit.schema import metrics_of
from stages.shared.core import vcs
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import load, read_params, section_of
from stages.shared.core.records import read_record, record_json
from stages.shared.studies.user_level import (
    ComparisonRow,
    UserLevelExperiment,
    UserLevelPlan,
    UserLevelTable,
    read_plan,
)
from stages.tools.studies.user_level import MECHANISMS, UserLevelPlanParams, comparison_rows, mechanism_run

PRESET = "presets/user_level.args"


def experiment_name(k: int, seed: int) -> str:
    return f"user-level-k{k}-s{seed}"


def overrides(repo: Path, design: UserLevelPlanParams, k: int, seed: int) -> list[str]:
    """The preset's lines in order, then the design's: each mechanism's run at (epsilon, delta, q, T), its unit, k
    and the seed (canaries, audit users and fine-tune draw from it, each through its own named stream)."""
    lines = preset_lines(repo, PRESET)
    if k not in design.rows:
        raise ConfigError(f"--k {k}: the design's rows per canary user are {list(design.rows)} (studies.yaml)")
    if seed not in design.confirmation_seeds:
        raise ConfigError(f"--seed {seed}: the design's seeds are {list(design.confirmation_seeds)} (studies.yaml)")
    lines += [f"canaries.seed={seed}", f"canaries.audit_users.seed={seed}", f"canaries.audit_users.rows={k}",
              f"canaries.audit_users.m={design.m}", f"audit.user.k_pos={design.k_pos}", "audit.user.k_neg=0"]
    for run in MECHANISMS:
        for key, value in mechanism_run(run, design, k, seed).items():
            lines.append(f"++runs.{run}.{key}={_hydra(value)}")
    return lines


def _hydra(value) -> str:
    """A value in DVC's --set-param grammar, without spaces."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra(v)}" for k, v in value.items()) + "}"
    return json.dumps(value).replace(" ", "")


def run_experiment(repo: Path, design: UserLevelPlanParams, k: int, seed: int) -> str:
    """``dvc exp run --temp -n <name>`` with the overrides, then the ledger records its runs."""
    from flows.pooled_audit import record

    name = experiment_name(k, seed)
    if vcs.git_dirty(repo, "studies.yaml", "params.yaml", PRESET):
        raise ConfigError(f"studies.yaml, params.yaml, {PRESET}: commit the design and recipe before its runs")
    args = [a for o in overrides(repo, design, k, seed) for a in ("-S", o)]
    start = time.monotonic()
    vcs.dvc(repo, "exp", "run", "--temp", "-n", name, *args, stream=True)
    print(f"user_level: experiment {name} took {time.monotonic() - start:.0f} s", flush=True)
    record(str(repo), experiment=name)
    return name


def table(repo: Path, plan: UserLevelPlan, records: Path) -> UserLevelTable:
    """reports/user_level.json: the design (its prediction included) and its plan's commit, and per experiment its
    rows, with its params.yaml and dvc.lock kept under ``records`` (git-tracked: an experiment's commit lives in the
    checkout that ran it, its lock travels with the table); the table's experiments run in another checkout are kept
    as it recorded them (``flows.runtime.experiments.carried``)."""
    commits = experiment_commits(repo, "user-level-k")
    kept_table = repo / records.with_suffix(".json")
    design = record_json(plan.design)
    experiments = [read_record(UserLevelExperiment, e, f"{kept_table}: experiment {e.get('experiment')}")
                   for e in carried(kept_table, repo, commits, design)]
    for name, rev in sorted(commits.items()):
        params_text, kept = keep_records(repo, rev, name, records)
        raw = yaml.safe_load(params_text)
        path = section_of(raw, "audit.out")
        metrics = metrics_of(json.loads(vcs.git(repo, "show", f"{rev}:{path}")), f"{name}:{path}")
        rows = [read_record(ComparisonRow, r, f"{name}: row") for r in comparison_rows(metrics, plan.design_commit)]
        experiments.append(UserLevelExperiment(
            experiment=name, commit=rev, k=section_of(raw, "canaries.audit_users.rows"),
            seed=section_of(raw, "canaries.seed"), params=kept["params"], lock=kept["lock"], rows=rows))
    experiments.sort(key=lambda e: e.experiment)
    return UserLevelTable(design=plan.design, design_commit=plan.design_commit, recipe=PRESET,
                          experiments=experiments)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--run", action="store_true", help="run the experiment of --k and --seed first")
    ap.add_argument("--k", type=int, default=4, help="rows per audit user (one of the design's rows)")
    ap.add_argument("--seed", type=int, default=None, help="one of the design's confirmation seeds (default: first)")
    args = ap.parse_args(argv)
    repo = Path(args.repo).resolve()
    raw = read_params(repo / "params.yaml")
    design = load(UserLevelPlanParams, "user_level", repo / "params.yaml", raw)
    plan = read_plan(repo / design.out)
    if args.run:
        run_experiment(repo, design, args.k, args.seed if args.seed is not None else design.confirmation_seeds[0])
    out = repo / section_of(raw, "report.user_level")
    data = table(repo, plan, out.relative_to(repo).with_suffix(""))
    write_table(out, record_json(data))
    for e in data.experiments:
        for r in e.rows:
            eps = "–" if r.epsilon is None else f"{r.epsilon:.2f}"
            print(f"{e.experiment}: {r.mechanism:20s} {r.unit:7s} eps {eps} k {r.k} "
                  f"{r.v} of {r.r} right, eps-hat95 {r.eps_lb_95:.3f} ({r.seed_status})")


if __name__ == "__main__":
    main()
