"""DVC stage ``base_model``: convert/copy the configured causal LM to data/models/base (safetensors + tokenizer)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from stages.base_model.convert import convert, resolve
from stages.base_model.params import ModelParams
from stages.shared.core.cli import run_cli, stage_args
from stages.shared.core.io import atomic_dir
from stages.shared.core.params import load

log = logging.getLogger("stages.base_model")


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__)
    params = load(ModelParams, "model", args.params, raw)
    resolve(params.name_or_path)  # fail fast on a bad source, before any output exists
    with atomic_dir(Path(params.out)) as tmp:
        info = convert(params, tmp)
    log.info("base model %s (%s, %d parameters, vocab %d) -> %s", info["name_or_path"], info["architecture"],
             info["num_parameters"], info["vocab_size"], params.out)


if __name__ == "__main__":
    run_cli(main)
