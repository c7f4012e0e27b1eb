"""DVC stage ``reference@<set>``: RMIA's reference fine-tune ``reference.sets.<set>`` (the recipe of its run on
population rows, ``stages.reference.train``) -> <reference.out_dir>/<set>/ (trainable weights and
reference.json)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from stages.finetune.params import load_finetune
from stages.reference.params import ReferenceParams
from stages.reference.train import init_seed, train_reference
from stages.shared.core.artifacts import locations
from stages.shared.core.cli import run_cli, stage_args
from stages.shared.core.errors import ConfigError
from stages.shared.core.io import atomic_dir
from stages.shared.core.params import load
from stages.shared.datasets import get_dataset
from stages.shared.lm.loading import pick_device


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "set")
    refs = load(ReferenceParams, "reference", args.params, raw)
    if args.set not in refs.sets:
        raise ConfigError(f"{args.params}: reference.sets.{args.set}: no such set "
                          f"(known: {', '.join(refs.sets) or 'none'})")
    ref = refs.sets[args.set]
    ft = load_finetune(ref.run, args.params, raw)
    init_seed(ref.seed)
    with atomic_dir(Path(refs.out_dir) / args.set) as tmp:
        train_reference(args.set, ref.run, ref.seed, ft, get_dataset(ft.dataset, raw), locations(raw, args.params),
                        tmp, pick_device(ft.device))


if __name__ == "__main__":
    run_cli(main)
