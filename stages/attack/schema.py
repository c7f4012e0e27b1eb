"""The public contract of the attack stage (data/scores/<run>/), read by the audit and the report.

* ``<attack>.parquet``: SCORES (membership), MEMORIZATION (VMR/AIR/ACR) or EXPOSURE, by the attack's
  family; ``<attack>.json`` for the other families (embedding inversion);
* ``logprobs.parquet`` (LOGPROBS): the per-token log-probability cache every attack read;
* ``run.json``: an ``AttackRecord`` (versioned): which attacks ran on which model weights (the fine-tuned run's
  own record and manifest stay in its run directory: ``stages.finetune.schema``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import pyarrow as pa

from ..shared.core.errors import DataError
from ..shared.core.io import read_json, read_table, write_json

ATTACK_VERSION = 5  # what a reader refuses when it differs (the history of the versions: git log -L of this line)

#: one membership score per item (a canary, a text sample, a user); higher = more likely a member
SCORES = pa.schema([
    pa.field("item_id", pa.string(), nullable=False),
    pa.field("group", pa.string(), nullable=False),  # canary kind, "text" or "users"
    pa.field("member", pa.bool_(), nullable=False),
    pa.field("score", pa.float64(), nullable=False),
])

#: memorization of real secrets: one row per secret (VMR / AIR), fine-tuned vs reference model
MEMORIZATION = pa.schema([
    pa.field("secret_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("trained", pa.bool_(), nullable=False),  # the run's training rows contained it
    pa.field("score", pa.float64(), nullable=False),  # fine-tuned model
    pa.field("base_score", pa.float64(), nullable=False),  # reference (base) model
])

EXPOSURE = pa.schema([
    pa.field("canary_id", pa.string(), nullable=False),
    pa.field("format", pa.string(), nullable=False),
    pa.field("inserted", pa.bool_(), nullable=False),
    pa.field("repetitions", pa.int32(), nullable=False),
    pa.field("log_perplexity", pa.float64(), nullable=False),  # bits
    pa.field("rank", pa.int32(), nullable=False),
    pa.field("exposure", pa.float64(), nullable=False),
])

#: per-model, per-example token log-probabilities: the cache every attack reads
LOGPROBS = pa.schema([
    pa.field("key", pa.string(), nullable=False),  # sha1 of the example's token ids and labels
    pa.field("model", pa.string(), nullable=False),  # target | reference
    pa.field("model_fingerprint", pa.string(), nullable=False),
    pa.field("logprobs", pa.list_(pa.float32()), nullable=False),
    pa.field("top1", pa.list_(pa.bool_()), nullable=False),  # the label is the model's argmax there (EZ-MIA)
    pa.field("vocab_mean", pa.list_(pa.float32()), nullable=True),  # E_z[log p(z)], z ~ p (Min-K%++); target only
    pa.field("vocab_sd", pa.list_(pa.float32()), nullable=True),  # sd_z[log p(z)]; target only
])

#: the table schema of each family that writes a table
FAMILY_SCHEMAS = {"membership": SCORES, "memorization": MEMORIZATION, "exposure": EXPOSURE}


class AttackMeta(TypedDict):
    """What an attack declares at registration (``registry.Attack``), written with its scores."""

    family: str  # membership | exposure | memorization | inversion
    threat_model: str
    ranks_like: dict[str, str]  # canary kind -> the attack it ranks that kind's canaries identically to
    baseline: bool  # model-free: a shift check on non-randomised pools, not a leakage number


@dataclass(frozen=True)
class AttackRecord:
    """data/scores/<run>/run.json: which attacks ran on which weights (written with ``ATTACK_VERSION``)."""

    run: str
    attacks: dict[str, AttackMeta]  # attack -> what it declares, in the order they ran
    skipped: dict[str, str]  # attack of the default list (attack.attacks) the run cannot have -> why
    model_fingerprints: dict[str, str]  # target / reference -> fingerprint of the weights scored
    user_score: str  # the per-example score user inference averaged per user (attack.user_score)

    def to_json(self) -> dict[str, Any]:
        return {"version": ATTACK_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> "AttackRecord":
        """The record of ``data``; another version or a missing or unknown key is refused, naming the stage."""
        stage = f"attack@{Path(where).parent.name}"
        if data.get("version") != ATTACK_VERSION:
            raise DataError(f"{where}: attack record version {data.get('version')!r}, expected {ATTACK_VERSION} "
                            f"(rerun the {stage} stage)")
        names = [f.name for f in dataclasses.fields(cls)]
        keys = set(data) - {"version"}
        if keys != set(names):
            raise DataError(f"{where}: attack record keys {sorted(keys)}, expected {sorted(names)} (rerun the {stage} "
                            "stage)")
        return cls(**{k: data[k] for k in names})


def same_ranking(attacks: dict[str, AttackMeta]) -> dict[str, list[list[str]]]:
    """kind -> groups of the record's attacks declared to rank that kind's canaries identically: each group the
    attack others rank like, then those others in the record's order (attacks absent from the record left out)."""
    groups: dict[str, dict[str, list[str]]] = {}
    for name, meta in attacks.items():
        for kind, like in meta["ranks_like"].items():
            if like in attacks:
                groups.setdefault(kind, {}).setdefault(like, [like]).append(name)
    return {kind: list(by_anchor.values()) for kind, by_anchor in groups.items()}


def baseline_attacks(attacks: dict[str, AttackMeta]) -> list[str]:
    """The record's model-free baselines (membership family), in the order they ran."""
    return [name for name, meta in attacks.items() if meta["baseline"] and meta["family"] == "membership"]


def write_record(scores_dir: Path, record: AttackRecord) -> None:
    write_json(Path(scores_dir) / "run.json", record.to_json())


def read_record(scores_dir: Path) -> AttackRecord:
    path = Path(scores_dir) / "run.json"
    return AttackRecord.from_json(read_json(path, f"attack@{Path(scores_dir).name}"), str(path))


def read_attack_table(scores_dir: Path, attack: str, family: str) -> pa.Table:
    return read_table(Path(scores_dir) / f"{attack}.parquet", FAMILY_SCHEMAS[family], f"attack@{Path(scores_dir).name}")


def read_attack_json(scores_dir: Path, attack: str) -> Any:
    return read_json(Path(scores_dir) / f"{attack}.json", f"attack@{Path(scores_dir).name}")
