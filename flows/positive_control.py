"""Can the instruments see? (studies.yaml ``positive_control``): non-DP full fine-tunes trained until they memorise,
every instrument at each checkpoint on the default run's pools, and the DP counterpart, one DVC experiment per
dataset; its table is ``report.positive_control`` (reports/positive_control.json, git-tracked; the report shows it).

    python -m flows.positive_control --run --dataset tofu_authors   # experiment positive-control-<dataset>-s<seed>
    python -m flows.positive_control                                # the table from the experiments already run
    python -m flows.positive_control --section positive_control_power --run --dataset tofu_authors

A follow-up design of the same shape (``--section``: studies.yaml ``positive_control_power``, its table
``report.positive_control_power``) runs its own experiments under its own name prefix; the first design and its
table stay as they ran.

Orchestration only: the recipe is presets/positive_control.args, the design studies.yaml ``positive_control``
(committed before its runs), the rows and verdicts ``stages.tools.studies.positive_control``.
"""
from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from flows.runtime.experiments import carried, experiment_commits, keep_records, preset_lines, write_table
from stages.audit.schema import metrics_of
from stages.shared.core import vcs
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import load, read_params, section_of
from stages.shared.core.records import read_record, record_json
from stages.shared.studies.positive_control import Experiment, PositiveControlTable
from stages.tools.studies.positive_control import (
    PositiveControlParams,
    dataset_rows,
    runs_of,
    study_overrides,
    verdicts,
)

PRESET = "presets/positive_control.args"
SECTION = "positive_control"
#: each design's section -> the name prefix of its experiments (none a prefix of another: a table reads its own)
PREFIXES = {SECTION: "positive-control-", "positive_control_power": "pc-power-"}


def prefix_of(section: str) -> str:
    if section not in PREFIXES:
        raise ConfigError(f"--section {section}: one of {sorted(PREFIXES)}")
    return PREFIXES[section]


def experiment_name(dataset: str, seed: int, section: str = SECTION) -> str:
    return f"{prefix_of(section)}{dataset.replace('_', '-')}-s{seed}"


def run_experiment(repo: Path, design: PositiveControlParams, dataset: str, records: Path,
                   section: str = SECTION) -> str:
    """``dvc exp run --temp -n <name>`` with the preset's and the design's overrides (refused while the design or
    recipe is uncommitted); its wall-clock seconds are kept as ``records/<name>.seconds`` beside the table."""
    name = experiment_name(dataset, design.seed, section)
    if vcs.git_dirty(repo, "studies.yaml", "params.yaml", PRESET):
        raise ConfigError(f"studies.yaml, params.yaml, {PRESET}: commit the design and recipe before its runs")
    args = [a for o in preset_lines(repo, PRESET)
            + study_overrides(design, dataset, read_params(repo / "params.yaml")) for a in ("-S", o)]
    start = time.monotonic()
    # up to the audit: the report stage reads the table this flow writes from the experiments
    vcs.dvc(repo, "exp", "run", "--temp", "-n", name, *args, "audit", stream=True)
    seconds = round(time.monotonic() - start)
    print(f"positive_control: experiment {name} took {seconds} s", flush=True)
    (repo / records).mkdir(parents=True, exist_ok=True)
    (repo / records / f"{name}.seconds").write_text(f"{seconds}\n")
    return name


def design_commit(repo: Path, section: str = SECTION) -> str | None:
    """The newest commit that changed studies.yaml's ``section`` design."""
    log = vcs.git(repo, "log", "-n1", "--format=%H", "-s", "-L", f"/^{section}:/,/^  predictions:/:studies.yaml")
    return log.strip() or None


def user_losses(repo: Path, rev: str, scores_dir: str, run: str) -> list[dict]:
    """The experiment's ``loss`` scores of the users pool (per user: the mean log-likelihood of the attacker's
    samples), read from DVC's cache at the experiment's commit."""
    import dvc.api

    with dvc.api.open(f"{scores_dir}/{run}/loss.parquet", repo=str(repo), rev=rev, mode="rb") as f:
        table = pq.read_table(io.BytesIO(f.read())).to_pylist()
    return [r for r in table if r["group"] == "users"]


def table(repo: Path, design: PositiveControlParams, records: Path, section: str = SECTION) -> PositiveControlTable:
    """reports/positive_control.json: the design and its commit, per experiment its rows (``dataset_rows``) with its
    params.yaml and dvc.lock kept under ``records``, and the verdict of each prediction over every experiment."""
    raw_design = read_params(repo / "params.yaml")[section]
    commits = experiment_commits(repo, prefix_of(section))
    kept_table = repo / records.with_suffix(".json")
    experiments = [read_record(Experiment, e, f"{kept_table}: experiment {e.get('experiment')}")
                   for e in carried(kept_table, repo, commits, raw_design)]
    for name, rev in sorted(commits.items()):
        ran_under = yaml.safe_load(vcs.git(repo, "show", f"{rev}:studies.yaml")).get(section)
        if ran_under != raw_design:
            raise ConfigError(f"experiment {name}: ran under another studies.yaml {section} design than "
                              f"today's (`dvc exp remove {name}`, or restore that design)")
        params_text, kept = keep_records(repo, rev, name, records)
        raw = yaml.safe_load(params_text)
        path = section_of(raw, "audit.out")
        metrics = metrics_of(json.loads(vcs.git(repo, "show", f"{rev}:{path}")), f"{name}:{path}")
        dataset = next(d for d in design.datasets if all(r in raw["runs"] for r in runs_of(design, d, raw)))
        scored = "loss" in design.datasets[dataset]["attacks"]  # the users' losses are the loss attack's scores
        losses = {run: user_losses(repo, rev, section_of(raw, "attack.out_dir"), run) if scored else []
                  for run in runs_of(design, dataset, raw)}
        timing = repo / records / f"{name}.seconds"
        checkpoints, rows = dataset_rows(design, dataset, metrics, losses)
        experiments.append(Experiment(experiment=name, commit=rev, dataset=dataset, params=kept["params"],
                                      lock=kept["lock"],
                                      seconds=int(timing.read_text()) if timing.is_file() else None,
                                      checkpoints=checkpoints, rows=rows))
    experiments.sort(key=lambda e: e.experiment)
    return PositiveControlTable(design=raw_design, design_commit=design_commit(repo, section), recipe=PRESET,
                                experiments=experiments, verdicts=verdicts(design, experiments))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--run", action="store_true", help="run the experiment of --dataset first")
    ap.add_argument("--dataset", default=None, help="one of the design's datasets (default: the first)")
    ap.add_argument("--section", default=SECTION, help=f"the design's studies.yaml section: {sorted(PREFIXES)}")
    args = ap.parse_args(argv)
    repo = Path(args.repo).resolve()
    raw = read_params(repo / "params.yaml")
    prefix_of(args.section)
    design = load(PositiveControlParams, args.section, repo / "params.yaml", raw)
    out = repo / section_of(raw, f"report.{args.section}")
    records = out.relative_to(repo).with_suffix("")
    if args.run:
        run_experiment(repo, design, args.dataset or next(iter(design.datasets)), records, args.section)
    data = table(repo, design, records, args.section)
    write_table(out, record_json(data))
    for v in data.verdicts:
        print(f"{v.prediction}: {v.verdict.value} ({v.of - v.failed} of {v.of} checks hold)")


if __name__ == "__main__":
    main()
