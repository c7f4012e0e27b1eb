"""Run every configured attack of one run over one shared log-probability cache and write their tables."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import pyarrow as pa

from ..finetune.schema import RunRecord
from ..reference.params import ReferenceParams
from ..shared.core.artifacts import Locations
from ..shared.core.errors import ConfigError
from ..shared.core.io import write_json, write_table
from ..shared.datasets import DatasetSpec
from ..shared.lm.loading import pick_device
from .catalog import ATTACKS, Attack
from .context import AttackContext
from .schema import FAMILY_SCHEMAS, LOGPROBS, AttackRecord, write_record

log = logging.getLogger("stages.attack")


def resolve_attacks(run: str, params, key_prefix: str = "") -> list[Attack]:
    """The run's attacks (attack.runs.<run>, else attack.attacks); an unknown name names its key."""
    names = params.for_run(run)
    key = f"attack.runs.{run}" if params.runs.get(run) else "attack.attacks"
    return [ATTACKS.get(a, key=f"{key_prefix}{key}[{i}]") for i, a in enumerate(names)]


def plan_attacks(run: str, params, has: Callable[[str], str | None]) -> tuple[list[Attack], dict[str, str]]:
    """(the attacks to run, attack -> why it is left out). ``has(need)`` says why the run lacks a requirement (None:
    it has it). The default list (``attack.attacks``) is meant for any run: an attack whose requirement the run
    lacks is left out with the reason, which the report shows (an external run has no frozen rows for whitebox, a
    run without canaries nothing for contrast). A list the run names itself (``attack.runs.<run>``) was asked for:
    a lacking requirement there is a one-line error naming the key."""
    explicit = bool(params.runs.get(run))
    keep, skipped = [], {}
    for a in resolve_attacks(run, params):  # every requirement checked before any work
        why = next((w for need in a.needs if (w := has(need))), None)
        if why is None:
            keep.append(a)
        elif explicit:
            raise ConfigError(f"attack.runs.{run}: attack {a.name!r}: {why}")
        else:
            skipped[a.name] = why
    if not keep:
        raise ConfigError(f"attack.attacks: no attack of the list can run on run {run!r} "
                          f"({'; '.join(f'{k}: {v}' for k, v in skipped.items())})")
    return keep, skipped


def run_attacks(run: str, params, where: Locations, record: RunRecord, dataset: DatasetSpec, out_dir: Path,
                references: ReferenceParams | None = None) -> None:
    """Check every attack's requirements, score every item once per model, run the attacks, write it all
    (``dataset``: the run's dataset's spec, resolved by the caller from the params it read; ``references``: RMIA's
    reference fine-tunes, the reference section)."""
    ctx = AttackContext(run, params, where, record, dataset, device=pick_device(record.params["device"]),
                        references=references)
    attacks, skipped = plan_attacks(run, params, ctx.has)
    for name, why in skipped.items():
        log.info("attack %s left out on %s: %s", name, run, why)
    sources = {s for a in attacks for need in a.needs for s in need.split("|")} & {"canaries", "text", "users",
                                                                                  "formatted"}
    if {"canaries", "text"} & sources and ctx.has("users") is None:  # per-example attacks also score users
        sources.add("users")
    sources = sorted(sources)
    ctx.precompute(sources, reference=any("reference" in a.needs for a in attacks))
    for a in attacks:
        out = a.run(ctx, params)
        if isinstance(out, tuple):  # a table and its JSON notes (e.g. the blind baseline's feature differences)
            out, notes = out
            write_json(out_dir / f"{a.name}.json", notes)
        if isinstance(out, pa.Table):
            write_table(out, out_dir / f"{a.name}.parquet", FAMILY_SCHEMAS[a.family])
        else:
            write_json(out_dir / f"{a.name}.json", out)
        log.info("attack %s on %s done", a.name, run)
    write_table(pa.Table.from_pylist(ctx.cache_rows(), schema=LOGPROBS), out_dir / "logprobs.parquet", LOGPROBS)
    write_record(out_dir, AttackRecord(run=run, attacks={a.name: a.declared() for a in attacks}, skipped=skipped,
                                       model_fingerprints=ctx.fingerprints, user_score=params.user_score))
