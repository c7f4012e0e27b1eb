"""Canary users (user-inference-attacks.txt App. D.2, Algorithm 1).

For each substring length l (``lengths``, ``per_length`` times): sample a real user uniformly, one of
the user's documents and an l-token substring of it; the canary user is that user with the substring
inserted at a random position of every one of their documents (training, validation and the
attacker's samples alike). The user is removed from the pool so each canary user is distinct.

Membership is a completely randomised assignment per length: a seeded permutation of the length's canary
users holds in the first half (an odd one out is a fair coin), independent of the user's original
held-in/held-out set, of who the user is and of the data, with both sides of every length equally large (a
length's AUROC has its power). ``documents`` is how many of a held-in canary user's trainable documents are
trained on (the seed's Figure 6, right): the held-in users of a length get the values of ``documents`` in
turn, in the permutation's order (null: all of them); a held-out user is trained on nothing, so every
held-out user of the length is a non-member for each count. A held-in canary user's trainable documents are
trained on whichever set the preprocess put the user in (``canary_user_split``). Canary users are reported as
their own group, per length and per (length, documents).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from ..shared.core.errors import DataError
from ..shared.core.io import write_table
from ..shared.core.seeds import stream
from ..shared.datasets import DatasetSpec, read_split
from .schema import CANARY_USERS, CANARY_USERS_FILE


def build_canary_users(params, spec: DatasetSpec, processed_dir: Path, tok, out_dir: Path) -> list[dict]:
    """Canary users drawn from the users of ``spec`` (``params.dataset``'s spec, resolved by the caller)."""
    docs: dict[str, list[dict]] = {}
    text = spec.user_columns[1]
    for split in spec.splits:
        for r in read_split(processed_dir, spec, split):
            docs.setdefault(r["user"], []).append(r)
    pool = sorted(docs)
    need = len(params.lengths) * params.per_length
    if need > len(pool):
        raise DataError(f"canaries.users: {need} canary users asked for but {params.dataset} has {len(pool)} users")
    rng = stream("canaries.users").numpy(params.seed)
    rows = []
    for length in params.lengths:
        n = params.per_length
        held_in = np.zeros(n, dtype=bool)
        order = rng.permutation(n)
        held_in[order[: n // 2 + (int(rng.random() < 0.5) if n % 2 else 0)]] = True
        documents = {int(i): params.documents[j % len(params.documents)]
                     for j, i in enumerate(i for i in order if held_in[i])}
        for i in range(n):
            user = pool.pop(int(rng.integers(len(pool))))
            candidates = [d for d in docs[user] if len(tok(d[text], add_special_tokens=False)["input_ids"]) >= length]
            if not candidates:
                raise DataError(f"canaries.users.lengths: user {user} has no document of {length} tokens")
            doc = candidates[int(rng.integers(len(candidates)))]
            ids = tok(doc[text], add_special_tokens=False)["input_ids"]
            start = int(rng.integers(0, len(ids) - length + 1))
            rows.append({"dataset": params.dataset, "user": user, "length": length,
                         "user_set": "held_in" if held_in[i] else "held_out", "documents": documents.get(i),
                         "substring": (tok.decode(ids[start:start + length]).strip()
                                       or tok.decode(ids[start:start + length]))})
    write_table(pa.Table.from_pylist(rows, schema=CANARY_USERS), out_dir / CANARY_USERS_FILE, CANARY_USERS)
    return rows
