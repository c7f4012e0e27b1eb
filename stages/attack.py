"""DVC stage ``attack@<run>``: every configured attack on the fine-tuned model of a run ->
data/scores/<run>/<attack>.parquet, the shared log-probability cache (logprobs.parquet) and run.json
(the run's training and privacy record, passed on to the audit)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from .config import (AttackParams, CanaryParams, ModelParams, PreprocessParams, SecretsParams, load, load_finetune,
                     stage_args)
from .errors import ConfigError, run_cli
from .io import atomic_dir

log = logging.getLogger("stages.attack")


def resolve_attacks(run: str, params: AttackParams, key_prefix: str = ""):
    from .attacks import ATTACKS

    names = params.for_run(run)
    key = f"attack.runs.{run}" if run in params.runs else "attack.attacks"
    return [ATTACKS.get(a, key=f"{key_prefix}{key}[{i}]") for i, a in enumerate(names)]


def run_attacks(run: str, params: AttackParams, ft, ctx_dirs: dict, out_dir: Path) -> dict:
    import pyarrow as pa

    from .attacks.context import AttackContext
    from .data.schemas import LOGPROBS
    from .io import write_json, write_table
    from .models.loading import pick_device

    attacks = resolve_attacks(run, params)
    ctx = AttackContext(run, ft, params, device=pick_device(ft.device), run_dir=Path(ft.out_dir) / run, **ctx_dirs)
    for a in attacks:  # every requirement checked before any work
        for need in a.needs:
            why = ctx.has(need)
            if why:
                raise ConfigError(f"attack {a.name!r} on run {run!r}: {why}")
    sources = sorted({s for a in attacks for need in a.needs for s in need.split("|")}
                     & {"canaries", "text", "users", "formatted"})
    ctx.precompute(sources, reference=any("reference" in a.needs for a in attacks))
    families = {}
    for a in attacks:
        out = a.run(ctx, params)
        families[a.name] = a.family
        if isinstance(out, pa.Table):
            from .data.schemas import EXPOSURE, MEMORIZATION, SCORES

            schema = {"membership": SCORES, "memorization": MEMORIZATION, "exposure": EXPOSURE}[a.family]
            write_table(out, out_dir / f"{a.name}.parquet", schema)
        else:
            write_json(out_dir / f"{a.name}.json", out)
        log.info("attack %s on %s done", a.name, run)
    write_table(pa.Table.from_pylist(ctx.cache_rows(), schema=LOGPROBS), out_dir / "logprobs.parquet", LOGPROBS)
    write_json(out_dir / "run.json", {**ctx.info, "attacks": families, "objective": ft.objective,
                                      "model_fingerprints": ctx.fingerprints})
    return ctx.info


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "run")
    params = load(AttackParams, "attack", args.params, raw)
    ft = load_finetune(args.run, args.params, raw)
    dirs = {"canary_dir": Path(load(CanaryParams, "canaries", args.params, raw).out_dir),
            "base_dir": Path(load(ModelParams, "model", args.params, raw).out),
            "processed_dir": Path(load(PreprocessParams, "preprocess", args.params, raw).out_dir),
            "secrets_dir": Path(load(SecretsParams, "secrets", args.params, raw).out_dir)}
    resolve_attacks(args.run, params, key_prefix=f"{args.params}: ")  # unknown names fail before any work
    with atomic_dir(Path(params.out_dir) / args.run) as tmp:
        run_attacks(args.run, params, ft, dirs, tmp)


if __name__ == "__main__":
    run_cli(main)
