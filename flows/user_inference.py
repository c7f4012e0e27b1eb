"""User inference with power (studies.yaml ``user_inference``): Algorithm 1 canary users over every TOFU author, half
held in, on the non-DP run and on example-level and user-level DP-SGD, one DVC experiment per substring length; its
table is ``report.user_inference`` (reports/user_inference.json, git-tracked; the report shows it).

    python -m flows.user_inference --run --length 10   # experiment user-inference-l10-s<seed> (about 25 min), table
    python -m flows.user_inference                     # the table from the experiments already run

Orchestration only: the recipe is presets/user_inference.args, the design studies.yaml ``user_inference`` (committed
before its runs), the rows ``stages.tools.studies.user_inference.inference_rows``. The prediction is stated beside the
rows, never fitted to them.
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
from stages.shared.studies.user_inference import InferenceExperiment, InferenceRow, UserInferenceTable
from stages.tools.studies.user_inference import UserInferenceStudyParams, inference_rows, study_overrides

PRESET = "presets/user_inference.args"
PREFIX = "user-inference-l"


def experiment_name(length: int, seed: int) -> str:
    return f"{PREFIX}{length}-s{seed}"


def overrides(repo: Path, design: UserInferenceStudyParams, length: int) -> list[str]:
    """The preset's lines in order, then the design's (``study_overrides``)."""
    if length not in design.lengths:
        raise ConfigError(f"--length {length}: the design's lengths are {list(design.lengths)} (studies.yaml)")
    return preset_lines(repo, PRESET) + study_overrides(design, length)


def run_experiment(repo: Path, design: UserInferenceStudyParams, length: int) -> str:
    """``dvc exp run --temp -n <name>`` with the overrides (refused while the design or recipe is uncommitted)."""
    name = experiment_name(length, design.seed)
    if vcs.git_dirty(repo, "studies.yaml", "params.yaml", PRESET):
        raise ConfigError(f"studies.yaml, params.yaml, {PRESET}: commit the design and recipe before its runs")
    args = [a for o in overrides(repo, design, length) for a in ("-S", o)]
    start = time.monotonic()
    vcs.dvc(repo, "exp", "run", "--temp", "-n", name, *args, stream=True)
    print(f"user_inference: experiment {name} took {time.monotonic() - start:.0f} s", flush=True)
    return name


def design_commit(repo: Path) -> str | None:
    """The newest commit that changed studies.yaml's ``user_inference`` design (its committed design)."""
    log = vcs.git(repo, "log", "-n1", "--format=%H", "-s", "-L", "/^user_inference:/,/^  prediction:/:studies.yaml")
    return log.strip() or None


def table(repo: Path, design: UserInferenceStudyParams, records: Path) -> UserInferenceTable:
    """reports/user_inference.json: the design and its commit, and per experiment its rows, with its params.yaml and
    dvc.lock kept under ``records`` (git-tracked: an experiment's commit lives in the checkout that ran it); the
    table's experiments run in another checkout are kept as it recorded them (``flows.runtime.experiments.carried``)."""
    commit = design_commit(repo)
    raw_design = read_params(repo / "params.yaml")["user_inference"]
    commits = experiment_commits(repo, PREFIX)
    kept_table = repo / records.with_suffix(".json")
    experiments = [read_record(InferenceExperiment, e, f"{kept_table}: experiment {e.get('experiment')}")
                   for e in carried(kept_table, repo, commits, raw_design)]
    for name, rev in sorted(commits.items()):
        ran_under = yaml.safe_load(vcs.git(repo, "show", f"{rev}:studies.yaml")).get("user_inference")
        if ran_under != raw_design:  # the table states the design it shows was fixed before its runs
            raise ConfigError(f"experiment {name}: ran under another studies.yaml user_inference design than today's "
                              f"(`dvc exp remove {name}`, or restore that design)")
        params_text, kept = keep_records(repo, rev, name, records)
        raw = yaml.safe_load(params_text)
        path = section_of(raw, "audit.out")
        metrics = metrics_of(json.loads(vcs.git(repo, "show", f"{rev}:{path}")), f"{name}:{path}")
        length = section_of(raw, "canaries.users.lengths")[0]
        seed = section_of(raw, "canaries.users.seed")
        rows = [read_record(InferenceRow, r, f"{name}: row")
                for r in inference_rows(metrics, design.attack, length, seed, commit)]
        experiments.append(InferenceExperiment(experiment=name, commit=rev, length=length, seed=seed,
                                               params=kept["params"], lock=kept["lock"], rows=rows))
    experiments.sort(key=lambda e: e.experiment)
    return UserInferenceTable(design=design, design_commit=commit, recipe=PRESET, experiments=experiments)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--run", action="store_true", help="run the experiment of --length first")
    ap.add_argument("--length", type=int, default=None, help="one of the design's lengths (default: the first)")
    args = ap.parse_args(argv)
    repo = Path(args.repo).resolve()
    raw = read_params(repo / "params.yaml")
    design = load(UserInferenceStudyParams, "user_inference", repo / "params.yaml", raw)
    if args.run:
        run_experiment(repo, design, args.length if args.length is not None else design.lengths[0])
    out = repo / section_of(raw, "report.user_inference")
    data = table(repo, design, out.relative_to(repo).with_suffix(""))
    write_table(out, record_json(data))
    for e in data.experiments:
        for r in e.rows:
            auc = "–" if r.auroc is None else f"{r.auroc:.3f}"
            ci = "" if not r.auroc_ci95 else f" [{r.auroc_ci95[0]:.3f}, {r.auroc_ci95[1]:.3f}]"
            print(f"{e.experiment}: {r.mechanism:20s} length {r.length} documents {r.documents}: "
                  f"{r.members} vs {r.non_members} users, AUROC {auc}{ci}")


if __name__ == "__main__":
    main()
