"""The public contract of the canaries stage (data/canaries/), read by finetune, attack and audit.

* ``<kind>.parquet`` (CANARIES): every canary of a kind, member or not, with its reference log-probs;
* ``meta.json``: the kinds, m and members per kind, the new-token rows they need;
* ``formatted.parquet`` (FORMATTED): secret-sharer canaries for the exposure attack;
* ``canary_users.parquet`` (CANARY_USERS): users whose every document carries a substring, held in or
  out by a seeded coin (not by the user's original held-in/held-out set), and how the substring is
  inserted (``apply_canary_users``) and the user's documents are trained on or not
  (``canary_user_split``), so every stage treats them alike.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..core.io import read_json, read_table

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
    # log p(token_t | tokens_<t) of every position t >= 1 of prefix+secret under the reference model
    # (the base model with the new-token rows at their initialisation); empty when not computed
    pa.field("base_token_logprobs", pa.list_(pa.float32()), nullable=False),
])

CANARY_USERS = pa.schema([
    pa.field("user", pa.string(), nullable=False),
    pa.field("length", pa.int32(), nullable=False),  # substring length in tokens
    pa.field("user_set", pa.string(), nullable=False),  # held_in | held_out: the seeded coin's draw
    pa.field("substring", pa.string(), nullable=False),
])

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


def kind_path(canary_dir: Path, kind: str) -> Path:
    return Path(canary_dir) / f"{kind}.parquet"


def read_canaries(canary_dir: Path) -> tuple[dict, dict[str, list[dict]]]:
    """(meta.json, kind -> canary rows)."""
    meta = read_json(Path(canary_dir) / META, PRODUCER)
    rows = {k: read_table(kind_path(canary_dir, k), CANARIES, PRODUCER).to_pylist() for k in meta["kinds"]}
    return meta, rows


def read_formatted(canary_dir: Path) -> list[dict] | None:
    """The secret-sharer canaries, or None when the stage made none (canaries.formatted.enabled: false)."""
    path = Path(canary_dir) / FORMATTED_FILE
    return read_table(path, FORMATTED, PRODUCER).to_pylist() if path.is_file() else None


def load_canary_users(canary_dir: Path) -> dict[str, dict]:
    """user -> {length, user_set, substring}, or {} when the canaries stage made no canary users."""
    path = Path(canary_dir) / CANARY_USERS_FILE
    if not path.is_file():
        return {}
    return {r["user"]: r for r in read_table(path, CANARY_USERS, PRODUCER).to_pylist()}


def canary_user_split(read, split: str, canary_users: dict[str, dict]) -> list[dict]:
    """Rows of a user-level ``split`` (``read(split)`` -> rows) with canary users moved to their drawn set:
    "train" holds a canary user's trainable documents (train or heldout split) iff the coin held them in,
    "heldout" iff it held them out; every other split is unchanged."""
    rows = read(split)
    if not canary_users or split not in ("train", "heldout"):
        return rows
    want = "held_in" if split == "train" else "held_out"
    other = read("heldout" if split == "train" else "train")
    keep = [r for r in rows if r["user"] not in canary_users or canary_users[r["user"]]["user_set"] == want]
    return keep + [r for r in other if r["user"] in canary_users and canary_users[r["user"]]["user_set"] == want]


def insert_substring(body: str, substring: str, key: str) -> str:
    """``substring`` inserted at a whitespace position of ``body`` drawn from a seed derived from ``key``
    (the message id), so every stage inserts it at the same place."""
    rng = np.random.default_rng(int(hashlib.sha1(key.encode()).hexdigest()[:12], 16))
    cuts = [0] + [i + 1 for i, ch in enumerate(body) if ch.isspace()] + [len(body)]
    i = cuts[int(rng.integers(len(cuts)))]
    return f"{body[:i]}{substring} {body[i:]}" if i < len(body) else f"{body} {substring}"


def apply_canary_users(rows: list[dict], canary_users: dict[str, dict]) -> list[dict]:
    """The rows with each canary user's substring inserted into all of that user's documents and the user's
    drawn held-in / held-out set as ``user_set``."""
    if not canary_users:
        return rows
    return [{**r, "body": insert_substring(r["body"], canary_users[r["user"]]["substring"], r["message_id"]),
             "user_set": canary_users[r["user"]]["user_set"]}
            if r.get("user") in canary_users else r for r in rows]
