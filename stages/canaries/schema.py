"""The public contract of the canaries stage (data/canaries/), read by finetune, attack and audit.

* ``<kind>.parquet`` (CANARIES): every canary of a kind, member or not (structure only: no model output, so it
  hashes the same on any machine for the kinds that draw without the model);
* ``canaries.reference_out`` (REFERENCE, a file of its own outside the directory): the reference model's
  log-probabilities of every canary, floats that may differ in the last bits across machines; only the stages
  that score read it (``read_reference``);
* ``meta.json``: the kinds, m and members per kind, the new-token rows they need;
* ``formatted.parquet`` (FORMATTED): secret-sharer canaries for the exposure attack;
* ``audit_users.parquet`` (AUDIT_USERS, with ``canaries.audit_users.enabled``): the user-level one-run audit's
  canary users, k rows each sharing a new token of the user's own, one coin per user (meta.json ``audit_users``);
  only runs with ``finetune.user_canaries`` train on them;
* ``canary_users.parquet`` (CANARY_USERS): users whose every document carries a substring, held in or
  out by a seeded coin (not by the user's original held-in/held-out set); how the substring is inserted and
  the user's documents are trained on or not is ``stages.shared.datasets.users`` (shared, so every stage treats
  them alike).
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..shared.core.io import read_json, read_table

PRODUCER = "canaries"

CANARIES = pa.schema([
    pa.field("canary_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("index", pa.int32(), nullable=False),
    pa.field("prefix_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("secret_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("member", pa.bool_(), nullable=False),
    # mean log(1 + corpus count) of the prefix / secret tokens (the canary sanity check compares these)
    pa.field("prefix_log_freq", pa.float32(), nullable=False),
    pa.field("secret_log_freq", pa.float32(), nullable=False),
])

REFERENCE = pa.schema([
    pa.field("canary_id", pa.string(), nullable=False),
    # log p(token_t | tokens_<t) of every position t >= 1 of prefix+secret under the reference model
    # (the base model with the new-token rows at their initialisation); empty when not computed
    pa.field("base_token_logprobs", pa.list_(pa.float32()), nullable=False),
])

CANARY_USERS = pa.schema([
    pa.field("dataset", pa.string(), nullable=False),  # the user-level dataset they were drawn from (canaries.users)
    pa.field("user", pa.string(), nullable=False),
    pa.field("length", pa.int32(), nullable=False),  # substring length in tokens
    pa.field("user_set", pa.string(), nullable=False),  # held_in | held_out: the seeded assignment's draw
    pa.field("documents", pa.int32()),  # a held-in user's trained documents at most (null: all; held out: null)
    pa.field("substring", pa.string(), nullable=False),
])

#: the user-level audit's canary users (``audit_users.py``): CANARIES rows of kind ``AUDIT_USERS_KIND`` and the user
#: each row belongs to (a user's rows share its secret and its coin)
AUDIT_USERS_KIND = "audit_users"
AUDIT_USERS = pa.schema([*CANARIES, pa.field("user", pa.int32(), nullable=False)])

FORMATTED = pa.schema([
    pa.field("canary_id", pa.string(), nullable=False),
    pa.field("format", pa.string(), nullable=False),
    pa.field("fill", pa.string(), nullable=False),
    pa.field("text", pa.string(), nullable=False),
    pa.field("inserted", pa.bool_(), nullable=False),
    pa.field("repetitions", pa.int32(), nullable=False),
])

META = "meta.json"
FORMATTED_FILE = "formatted.parquet"
CANARY_USERS_FILE = "canary_users.parquet"
AUDIT_USERS_FILE = "audit_users.parquet"


def kind_path(canary_dir: Path, kind: str) -> Path:
    return Path(canary_dir) / f"{kind}.parquet"


def read_canaries(canary_dir: Path) -> tuple[dict, dict[str, list[dict]]]:
    """(meta.json, kind -> canary rows)."""
    meta = read_json(Path(canary_dir) / META, PRODUCER)
    rows = {k: read_table(kind_path(canary_dir, k), CANARIES, PRODUCER).to_pylist() for k in meta["kinds"]}
    return meta, rows


def read_audit_users(canary_dir: Path) -> tuple[dict, list[dict]] | None:
    """(meta.json's ``audit_users`` entry, the AUDIT_USERS rows), or None when the stage made none."""
    meta = read_json(Path(canary_dir) / META, PRODUCER)
    if "audit_users" not in meta:
        return None
    return meta["audit_users"], read_table(Path(canary_dir) / AUDIT_USERS_FILE, AUDIT_USERS, PRODUCER).to_pylist()


def read_reference(path: Path) -> dict[str, list[float]]:
    """canary id -> its reference log-probabilities (``REFERENCE``)."""
    rows = read_table(path, REFERENCE, PRODUCER).to_pylist()
    return {r["canary_id"]: r["base_token_logprobs"] for r in rows}


def read_formatted(canary_dir: Path) -> list[dict] | None:
    """The secret-sharer canaries, or None when the stage made none (canaries.formatted.enabled: false)."""
    path = Path(canary_dir) / FORMATTED_FILE
    return read_table(path, FORMATTED, PRODUCER).to_pylist() if path.is_file() else None


def load_canary_users(canary_dir: Path, dataset: str | None = None) -> dict[str, dict]:
    """user -> {dataset, length, user_set, substring}: those drawn from ``dataset`` (a run's: another user-level
    dataset's canary users are not its users), else all; {} when the canaries stage made no canary users."""
    path = Path(canary_dir) / CANARY_USERS_FILE
    if not path.is_file():
        return {}
    return {r["user"]: r for r in read_table(path, CANARY_USERS, PRODUCER).to_pylist()
            if dataset is None or r["dataset"] == dataset}
