"""The attack-strength table: every membership attack, the 2023 family and 2026's, on the default non-DP run's text
rows and users and on ``tofu_users``' 100 vs 100 authors, from one command (docs/results.md):

    python -m flows.attack_strength --run    # runs the two DVC experiments below, then writes the table
    python -m flows.attack_strength          # the table from experiments already run

Experiments: ``rmia`` (presets/rmia.args: the default run plus two RMIA reference fine-tunes of nondp) and
``tofu-users`` (presets/tofu_users.args plus presets/rmia_tofu_users.args: 200 TOFU authors, one reference
fine-tune of that recipe). ``--run tofu-users`` runs one of them. Writes reports/attack_strength.json and
reports/attack_strength.md (git-tracked), each row the audit's summary from the experiment's metrics; the newer
attacks' strongest minus the 2023 family's strongest is a paired bootstrap on the experiment's scores (read from the
DVC cache at the experiment's commit). The flow only orchestrates: rows and margins come from
``stages.tools.studies.attacks``.
"""
from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path

import yaml

from flows.runtime.experiments import experiment_commits, preset_lines
from stages.audit.params import AuditParams
from stages.shared.core import vcs
from stages.shared.core.params import build, section_of
from stages.tools.studies.attacks import compared, margin, markdown, rows_of

#: experiment -> the preset files of its overrides
EXPERIMENTS = {"rmia": ["presets/rmia.args"],
               "tofu-users": ["presets/tofu_users.args", "presets/rmia_tofu_users.args"]}
#: (experiment, run, pool, title), in the table's order
POOLS = [("rmia", "nondp", "text", "Default non-DP run (`nondp`): text rows (trained vs never-trained answers of "
          "held-in authors)"),
         ("rmia", "nondp", "users", "Default non-DP run (`nondp`): users (20 held-in vs 20 held-out TOFU authors)"),
         ("tofu-users", "tofu_users", "users", "`tofu_users`: users (100 held-in vs 100 held-out TOFU authors)"),
         ("tofu-users", "tofu_users", "text", "`tofu_users`: text rows (trained vs never-trained answers of held-in "
          "authors)")]
OUT = Path("reports/attack_strength")


def overrides(repo: Path, files: list[str]) -> list[str]:
    """The Hydra overrides of preset files, one per line (comments and blank lines left out); a later file's
    override of a key replaces an earlier one's."""
    by_key: dict[str, str] = {}
    for f in files:
        for line in preset_lines(repo, f):
            by_key.pop(key := line.split("=", 1)[0].lstrip("+~").strip(), None)
            by_key[key] = line
    return list(by_key.values())


def run_experiment(repo: Path, name: str) -> None:
    """``dvc exp run --temp -n <name>`` with its presets' overrides, in a temporary copy (the workspace stays as it
    is; DVC's cache restores the unchanged stages)."""
    args = [a for o in overrides(repo, EXPERIMENTS[name]) for a in ("-S", o)]
    try:
        vcs.dvc(repo, "exp", "remove", name)  # an earlier one of that name
    except vcs.VcsError:
        pass  # none
    start = time.monotonic()
    vcs.dvc(repo, "exp", "run", "--temp", "-n", name, *args, stream=True)
    print(f"attack_strength: experiment {name} took {time.monotonic() - start:.0f} s", flush=True)


def experiment_commit(repo: Path, name: str) -> str:
    """The newest commit of DVC experiment ``name`` (``refs/exps/...``; `dvc exp list` shows them)."""
    found = experiment_commits(repo).get(name)
    if found is None:
        raise SystemExit(f"no DVC experiment named {name!r}: run `python -m flows.attack_strength --run`")
    return found


def scores(repo: Path, rev: str, scores_dir: str, attacks: list[str], pool: str) -> dict:
    """attack -> (item ids, scores, members) of the experiment's ``<scores_dir>/<attack>.parquet`` on ``pool``."""
    import dvc.api
    import numpy as np
    import pyarrow.parquet as pq

    out = {}
    for a in attacks:
        with dvc.api.open(f"{scores_dir}/{a}.parquet", repo=str(repo), rev=rev, mode="rb") as f:
            rows = [r for r in pq.read_table(io.BytesIO(f.read())).to_pylist() if r["group"] == pool]
        out[a] = ([r["item_id"] for r in rows], np.array([r["score"] for r in rows]),
                  np.array([r["member"] for r in rows], dtype=bool))
    return out


def build_table(repo: Path, fpr: str = "0.01") -> tuple[list[dict], str]:
    """Per pool (``POOLS``): its rows, the strongest attack's margin, and the markdown section."""
    records, text = [], []
    for exp, run, pool, title in POOLS:
        rev = experiment_commit(repo, exp)
        raw = yaml.safe_load(vcs.git(repo, "show", f"{rev}:params.yaml"))
        audit = build(AuditParams, raw["audit"], "audit")
        metrics = json.loads(vcs.git(repo, "show", f"{rev}:{audit.out}"))
        rows = rows_of(metrics["runs"][run], pool, fpr)
        data = scores(repo, rev, f"{section_of(raw, 'attack.out_dir')}/{run}", compared(rows), pool)
        diff = margin(rows, data, audit.bootstrap, audit.seed, audit.min_per_side)
        records.append({"experiment": exp, "commit": rev, "run": run, "pool": pool, "fpr": fpr, "rows": rows,
                        "margin": diff})
        text.append(markdown(title, rows, fpr, diff))
    return records, "\n".join(text)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--run", nargs="*", choices=list(EXPERIMENTS), default=None,
                    help="run these experiments first (`dvc exp run`; no name: both)")
    args = ap.parse_args(argv)
    repo = Path(args.repo).resolve()
    for name in (args.run or list(EXPERIMENTS)) if args.run is not None else ():
        run_experiment(repo, name)
    records, text = build_table(repo)
    out = repo / OUT
    out.with_suffix(".json").write_text(json.dumps(records, indent=1, default=float) + "\n")
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
