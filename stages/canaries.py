"""DVC stage ``canaries``: build m canaries per kind -> data/canaries/<kind>.parquet + meta.json + GX results."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

from .config import CanaryParams, ModelParams, load, stage_args
from .errors import DataError, run_cli
from .io import atomic_dir

log = logging.getLogger("stages.canaries")


def vocab_of(model_dir: Path):
    """Base vocabulary size and the ordinary token ids (special and added tokens excluded)."""
    import numpy as np
    from transformers import AutoTokenizer

    from .canary import Vocab

    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise DataError(f"{model_dir}: no base model here (run the base_model stage)")
    base_size = int(json.loads(cfg_path.read_text())["vocab_size"])
    tok = AutoTokenizer.from_pretrained(model_dir)
    excluded = set(tok.all_special_ids) | set(getattr(tok, "added_tokens_decoder", {}) or {})
    usable = min(len(tok), base_size)
    allowed = np.array([i for i in range(usable) if i not in excluded], dtype=np.int64)
    return Vocab(base_size=base_size, allowed=allowed)


def build_canaries(params: CanaryParams, vocab, out_dir: Path) -> dict:
    """Write every kind's canaries (schema- and GX-checked) and meta.json into ``out_dir``."""
    import pyarrow as pa

    from .canary import CANARY_KINDS, build_kind
    from .checks.gx import canary_frame, canary_suite, check
    from .data.schemas import CANARIES
    from .io import write_json, write_table

    specs = [CANARY_KINDS.get(k, key=f"canaries.kinds[{i}]") for i, k in enumerate(params.kinds)]
    offset = vocab.base_size
    meta = {"base_vocab_size": vocab.base_size, "new_token_init": params.new_token_init, "kinds": {}}
    gx_reports = {}
    for spec in specs:
        n_new = spec.new_tokens(params.num_canaries, params.secret_length)
        rows = build_kind(spec.name, params, vocab, offset)
        where = str(out_dir.parent / out_dir.name.split(".tmp-")[0].lstrip(".") / f"{spec.name}.parquet")
        gx_reports[spec.name] = check(
            f"canaries_{spec.name}",
            canary_frame(rows),
            canary_suite([spec.name], params.checks.member_share_min, params.checks.member_share_max,
                         params.prefix_length, params.secret_length),
            where,
        )
        write_table(pa.Table.from_pylist(rows, schema=CANARIES), out_dir / f"{spec.name}.parquet", CANARIES)
        members = sum(r["member"] for r in rows)
        meta["kinds"][spec.name] = {
            "m": len(rows), "members": members, "prefix_length": params.prefix_length,
            "secret_length": params.secret_length, "new_token_offset": offset if n_new else None,
            "new_tokens": n_new, "description": spec.description,
        }
        offset += n_new
        log.info("canaries: %s m=%d members=%d new tokens=%d", spec.name, len(rows), members, n_new)
    meta["num_new_tokens"] = offset - vocab.base_size
    write_json(out_dir / "meta.json", meta)
    write_json(out_dir / "gx_results.json", gx_reports)
    return meta


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__)
    params = load(CanaryParams, "canaries", args.params, raw)
    model = load(ModelParams, "model", args.params, raw)
    from .canary import CANARY_KINDS

    for i, k in enumerate(params.kinds):  # unknown kinds fail before anything is written
        CANARY_KINDS.get(k, key=f"{args.params}: canaries.kinds[{i}]")
    vocab = vocab_of(Path(model.out))
    with atomic_dir(Path(params.out_dir)) as tmp:
        build_canaries(params, vocab, tmp)


if __name__ == "__main__":
    run_cli(main)
