"""DVC stage ``attack@<run>``: every configured attack on the fine-tuned model of a run ->
data/scores/<run>/<attack>.parquet, the shared log-probability cache (logprobs.parquet) and run.json
(the run's training and privacy record, passed on to the audit). ``--replica <name>``: replica <name>'s
attacks (``replicas.attacks``) on its own model."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from stages.attack.params import AttackParams
from stages.attack.run import resolve_attacks, run_attacks
from stages.finetune.schema import read_run
from stages.reference.params import ReferenceParams
from stages.shared.core.artifacts import locations
from stages.shared.core.cli import run_cli, stage_args
from stages.shared.core.io import atomic_dir
from stages.shared.core.params import load, require_run
from stages.shared.datasets import get_dataset


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "run", replica=True)
    params = load(AttackParams, "attack", args.params, raw)
    require_run(raw, args.run, args.params)
    where = locations(raw, args.params)
    resolve_attacks(args.run, params, key_prefix=f"{args.params}: ")  # unknown names fail before any work
    record = read_run(where.run_dir(args.run), args.run)
    with atomic_dir(Path(params.out_dir) / args.run) as tmp:
        # RMIA's reference fine-tunes (the reference section); a replica scores replicas.attacks, never RMIA
        refs = None if args.replica else load(ReferenceParams, "reference", args.params, raw)
        run_attacks(args.run, params, where, record, get_dataset(record.params["dataset"], raw), tmp, refs)


if __name__ == "__main__":
    run_cli(main)
