"""DVC stage ``finetune@<run>``: fine-tune the base model on a processed dataset (PersonaChat by default)
plus the member canaries (non-DP or opacus DP-SGD) -> data/models/<run>/ (adapter, new-token rows,
run.json, manifest.parquet, train_log.jsonl) and its timings -> logs/finetune/<run>.json.
``--replica <name>`` trains replica <name> of its run (``stages.shared.core.replicas``) into its own directory."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from stages.finetune import distributed
from stages.finetune.params import load_finetune
from stages.finetune.run import run_finetune
from stages.shared.core.artifacts import locations
from stages.shared.core.cli import run_cli, stage_args
from stages.shared.core.errors import StageError
from stages.shared.core.io import atomic_dir
from stages.shared.core.seeds import stream
from stages.shared.datasets import get_dataset


def main(argv: Sequence[str] | None = None) -> None:
    import torch

    args, raw = stage_args(argv, __doc__, "run", replica=True)
    ft = load_finetune(args.run, args.params, raw)
    where = locations(raw, args.params)
    dataset = get_dataset(ft.dataset, raw)
    if ft.distributed.nproc_per_node > 1 and not distributed.under_torchrun():
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

        try:
            where_from = ["--replica", args.replica] if args.replica else ["--run", args.run]
            distributed.launch([*where_from, "--params", args.params], ft.distributed.nproc_per_node)
        except ChildFailedError as exc:
            raise StageError(f"finetune@{args.run}: {ft.distributed.nproc_per_node} data-parallel processes failed: "
                             f"{exc.get_first_failure()[1].message}") from None
        return
    rank, _, device = distributed.init(ft.device)
    # the trainable weights' initialisation (LoRA, new rows) draws from torch's RNG
    torch.manual_seed(stream("finetune.init").int_seed(ft.seed))
    try:
        if rank == 0:
            with atomic_dir(Path(ft.out_dir) / args.run) as tmp:
                run_finetune(args.run, ft, dataset, where, tmp, device)
        else:  # trains its share; rank 0 writes the run
            run_finetune(args.run, ft, dataset, where, None, device)
    finally:
        distributed.finish()


if __name__ == "__main__":
    run_cli(main)
