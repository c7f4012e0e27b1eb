"""DVC stage ``attack@<run>``: score every canary (members and non-members) under the fine-tuned
model -> data/scores/<run>/<attack>.parquet + run.json (the run's training and privacy record)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from .config import AttackParams, CanaryParams, ModelParams, load, load_finetune, stage_args
from .errors import run_cli
from .io import atomic_dir

log = logging.getLogger("stages.attack")


def run_attacks(run: str, params: AttackParams, ft, canary_dir: Path, base_dir: Path, out_dir: Path) -> dict:
    import pyarrow as pa

    from .attacks import ATTACKS
    from .data.schemas import SCORES
    from .finetune import load_canary_rows
    from .io import read_json, write_json, write_table
    from .models.loading import pick_device
    from .training.examples import canary_examples
    from .training.scoring import token_logprobs
    from .training.setup import load_model

    attacks = [ATTACKS.get(a, key=f"attack.attacks[{i}]") for i, a in enumerate(params.attacks)]
    run_dir = Path(ft.out_dir) / run
    info = read_json(run_dir / "run.json")
    device = pick_device(ft.device)
    model, tok = load_model(base_dir, run_dir, device)
    _, canaries = load_canary_rows(canary_dir)
    rows = [r for kind in canaries for r in canaries[kind]]
    examples = canary_examples(rows, ft.objective)  # the score follows the training objective
    lps = token_logprobs(model, examples, tok.pad_token_id, params.batch_size, desc=f"score {run}")
    for attack in attacks:
        scores = attack.score(lps)
        table = pa.table({
            "canary_id": [r["canary_id"] for r in rows],
            "kind": [r["kind"] for r in rows],
            "member": [r["member"] for r in rows],
            "score": scores,
        })
        write_table(table, out_dir / f"{attack.name}.parquet", SCORES)
    write_json(out_dir / "run.json", {**info, "attacks": [a.name for a in attacks], "objective": ft.objective})
    log.info("attack %s: scored %d canaries with %s", run, len(rows), ", ".join(a.name for a in attacks))
    return info


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "run")
    params = load(AttackParams, "attack", args.params, raw)
    ft = load_finetune(args.run, args.params, raw)
    canary_params = load(CanaryParams, "canaries", args.params, raw)
    model_params = load(ModelParams, "model", args.params, raw)
    from .attacks import ATTACKS

    for i, a in enumerate(params.attacks):
        ATTACKS.get(a, key=f"{args.params}: attack.attacks[{i}]")
    with atomic_dir(Path(params.out_dir) / args.run) as tmp:
        run_attacks(args.run, params, ft, Path(canary_params.out_dir), Path(model_params.out), tmp)


if __name__ == "__main__":
    run_cli(main)
