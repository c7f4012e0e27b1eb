"""DVC stage ``finetune@<run>``: fine-tune the base model on a processed dataset (PersonaChat by default)
plus the member canaries (non-DP or opacus DP-SGD) -> data/models/<run>/ (adapter, new-token rows,
run.json, privacy.json, train_log.jsonl)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from stages.core.artifacts import locations
from stages.core.cli import run_cli, stage_args
from stages.core.io import atomic_dir
from stages.finetune.params import load_finetune
from stages.finetune.run import run_finetune


def main(argv: Sequence[str] | None = None) -> None:
    import torch

    args, raw = stage_args(argv, __doc__, "run")
    ft = load_finetune(args.run, args.params, raw)
    where = locations(raw, args.params)
    torch.manual_seed(ft.seed)  # the trainable weights' initialisation (LoRA, new rows) draws from torch's RNG
    with atomic_dir(Path(ft.out_dir) / args.run) as tmp:
        run_finetune(args.run, ft, where, tmp)


if __name__ == "__main__":
    run_cli(main)
