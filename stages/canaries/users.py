"""Canary users (user-inference-attacks.txt App. D.2, Algorithm 1).

For each substring length l (``lengths``, ``per_length`` times): sample a real user, one of the
user's documents and an l-token substring of it; the canary user is that user with the substring
inserted at a random position of every one of their documents (training, validation and the
attacker's samples alike). The user is removed from the pool so each canary user is distinct, and
canary users alternate between held-in and held-out users so both sides of the test are present.
Canary users keep their held-in / held-out assignment, and are reported as their own group.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from ..core.errors import DataError
from ..core.io import write_table
from ..datasets import get_dataset, read_split
from .schema import CANARY_USERS, CANARY_USERS_FILE


def build_canary_users(params, processed_dir: Path, tok, out_dir: Path) -> list[dict]:
    docs: dict[str, list[dict]] = {}
    for split in get_dataset(params.dataset).splits:
        for r in read_split(processed_dir, params.dataset, split):
            docs.setdefault(r["user"], []).append(r)
    sets = {u: ds[0]["user_set"] for u, ds in docs.items()}
    pools = {s: sorted(u for u in docs if sets[u] == s) for s in ("held_in", "held_out")}
    need = len(params.lengths) * params.per_length
    if need > len(docs):
        raise DataError(f"canaries.users: {need} canary users asked for but {params.dataset} has {len(docs)} users")
    rng = np.random.default_rng(params.seed)
    rows = []
    turn = 0
    for length in params.lengths:
        for _ in range(params.per_length):
            # alternate held-in and held-out users so canary users have members and non-members to compare
            side = ("held_in", "held_out")[turn % 2] if pools[("held_in", "held_out")[turn % 2]] else \
                ("held_out", "held_in")[turn % 2]
            turn += 1
            pool = pools[side]
            user = pool.pop(int(rng.integers(len(pool))))
            candidates = [d for d in docs[user] if len(tok(d["body"], add_special_tokens=False)["input_ids"]) >= length]
            if not candidates:
                raise DataError(f"canaries.users.lengths: user {user} has no document of {length} tokens")
            doc = candidates[int(rng.integers(len(candidates)))]
            ids = tok(doc["body"], add_special_tokens=False)["input_ids"]
            start = int(rng.integers(0, len(ids) - length + 1))
            rows.append({"user": user, "length": length, "user_set": doc["user_set"],
                         "substring": tok.decode(ids[start:start + length]).strip() or tok.decode(ids[start:start + length])})
    write_table(pa.Table.from_pylist(rows, schema=CANARY_USERS), out_dir / CANARY_USERS_FILE, CANARY_USERS)
    return rows
