"""User-level datasets: their splits, and their rows with canary users applied.

``user_level_splits`` is the user-inference-attacks layout (App. D.1) every user-level dataset shares (Enron's
mailboxes, a text dataset's ``user_level``): half the users held in (trained on), half held out; of each user's
rows a share goes to valid/test, a share is the attacker's knowledge (never trained on) and the rest is trained on
(held-in users, ``train``) or kept aside (held-out users, ``heldout``).

With canary users: a canary user's substring is inserted into each of the user's documents at a seeded
whitespace position (``insert_substring``), and the user's documents move to the split of the user's drawn
held-in / held-out set (``canary_user_split``), at most ``documents`` of them trained on. Shared, so the fine-tune
(which trains on them) and the attack (which scores the attacker's samples of them) treat canary users alike; the
canary users themselves are the canaries stage's ``canary_users.parquet``. A dataset's ``user_columns`` name the id
and the text of its rows.
"""
from __future__ import annotations

import numpy as np

from ..core.seeds import stream
from .spec import split_groups

#: every split a user-level dataset writes: held-in training, valid/test, attacker knowledge, held-out users' rest
USER_SPLITS = ("train", "valid", "test", "attacker", "heldout")


def take_share(items: list, frac: float, rng: np.random.Generator) -> tuple[list, list]:
    """A seeded random ``frac`` share (at least one if frac > 0 and len > 1) and the rest."""
    k = int(round(len(items) * frac))
    if frac > 0 and k == 0 and len(items) > 1:
        k = 1
    order = rng.permutation(len(items))
    return [items[i] for i in order[:k]], [items[i] for i in order[k:]]


def user_level_splits(per_user: dict[str, list[dict]], heldout_fraction: float, attacker_fraction: float,
                      rows_rng: np.random.Generator, users_seed: int) -> tuple[dict[str, list[dict]], list]:
    """The user-level splits of ``per_user`` (user -> rows, each kept user) and their counts: users split 50/50
    into held-in and held-out by a seeded shuffle (``users_seed``); per user, in sorted order, ``heldout_fraction``
    of the rows to valid/test (half each, valid the larger), then ``attacker_fraction`` of the rest to the
    attacker, the remainder to train (held in) or heldout (held out). Rows gain ``user`` and ``user_set``."""
    sets = split_groups(sorted(per_user), 0.0, 0.5, users_seed)  # "test" half = held-out users
    out: dict[str, list[dict]] = {s: [] for s in USER_SPLITS}
    for u in sorted(per_user):
        user_set = "held_out" if u in sets["test"] else "held_in"
        ex = [{**r, "user": u, "user_set": user_set} for r in per_user[u]]
        held, rest = take_share(ex, heldout_fraction, rows_rng)
        out["valid"] += held[: (len(held) + 1) // 2]
        out["test"] += held[(len(held) + 1) // 2:]
        attacker, rest = take_share(rest, attacker_fraction, rows_rng)
        out["attacker"] += attacker
        out["train" if user_set == "held_in" else "heldout"] += rest
    stats = [("held-in users", len(sets["train"])), ("held-out users", len(sets["test"]))]
    return out, stats


def canary_user_split(read, split: str, canary_users: dict[str, dict]) -> list[dict]:
    """Rows of a user-level ``split`` (``read(split)`` -> rows) with canary users moved to their drawn set:
    "train" holds a canary user's trainable documents (train or heldout split) iff the assignment held them in,
    the first ``documents`` of them in the split's (seeded) order where the canary user caps them, "heldout" iff
    it held them out; every other split is unchanged."""
    rows = read(split)
    if not canary_users or split not in ("train", "heldout"):
        return rows
    want = "held_in" if split == "train" else "held_out"
    other = read("heldout" if split == "train" else "train")
    keep = [r for r in rows if r["user"] not in canary_users or canary_users[r["user"]]["user_set"] == want]
    moved = keep + [r for r in other if r["user"] in canary_users and canary_users[r["user"]]["user_set"] == want]
    if split == "heldout":
        return moved
    seen: dict[str, int] = {}
    out = []
    for r in moved:
        cap = canary_users[r["user"]].get("documents") if r["user"] in canary_users else None
        seen[r["user"]] = seen.get(r["user"], 0) + 1
        if cap is None or seen[r["user"]] <= cap:
            out.append(r)
    return out


def insert_substring(body: str, substring: str, key: str) -> str:
    """``substring`` inserted at a whitespace position of ``body`` drawn from a seed derived from ``key``
    (the message id), so every stage inserts it at the same place."""
    rng = stream("canaries.user_substring").numpy(key=key)
    cuts = [0] + [i + 1 for i, ch in enumerate(body) if ch.isspace()] + [len(body)]
    i = cuts[int(rng.integers(len(cuts)))]
    return f"{body[:i]}{substring} {body[i:]}" if i < len(body) else f"{body} {substring}"


def apply_canary_users(rows: list[dict], canary_users: dict[str, dict], columns: tuple[str, str]) -> list[dict]:
    """The rows with each canary user's substring inserted into all of that user's documents (``columns``: the
    rows' id and text, the dataset's ``user_columns``) and the user's drawn held-in / held-out set as
    ``user_set``."""
    if not canary_users:
        return rows
    key, text = columns
    return [{**r, text: insert_substring(r[text], canary_users[r["user"]]["substring"], r[key]),
             "user_set": canary_users[r["user"]]["user_set"]}
            if r.get("user") in canary_users else r for r in rows]
