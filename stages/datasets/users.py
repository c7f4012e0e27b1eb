"""Rows of user-level datasets with canary users applied: a canary user's substring is inserted into each of
the user's documents at a seeded whitespace position (``insert_substring``), and the user's documents move to
the split of the user's drawn held-in / held-out set (``canary_user_split``). Shared, so the fine-tune (which
trains on them) and the attack (which scores the attacker's samples of them) treat canary users alike; the
canary users themselves are the canaries stage's ``canary_users.parquet``."""
from __future__ import annotations

from ..core.seeds import stream


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
    rng = stream("canaries.user_substring").numpy(key=key)
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
