"""Audit users: canary users for the one-run audit at the user level (what a guarantee protects is the person).

``m`` canary users, each held in or out by its own seeded coin (Steinke et al. 2023's randomisation, over users),
each with ``rows`` rows that share the user's secret: a new token of its own (no other user's row and no text row
holds it), after a random prefix of ``prefix_length`` ordinary tokens drawn per row. A held-in user's rows are all
trained on, a held-out user's none. The audit scores every row with the primary attack and sums a user's scores
(their clipped gradients add along the one secret row, the linear model of ``stages.tools.studies.user_level``), then
runs the one-run test over the users.

A run inserts them only with ``finetune.user_canaries`` (its model gets their ``m`` new-token rows after the kinds'):
the runs without them, and their designs, are as they were. The rows are CANARIES rows of kind ``audit_users`` with
the user's index beside them (``AUDIT_USERS``), so a run treats them as it treats token canaries; under example-level
DP each row is sampled on its own, under user-level DP a user's rows are one unit.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..shared.core.gx import Expectation as E
from ..shared.core.gx import Suite
from ..shared.core.io import write_table
from ..shared.core.params import check
from ..shared.core.seeds import stream
from .checks import member_share_band
from .kinds import Vocab, random_prefixes
from .schema import AUDIT_USERS, AUDIT_USERS_FILE, AUDIT_USERS_KIND


@dataclass(frozen=True)
class AuditUsersParams:
    """``canaries.audit_users``: the user-level one-run audit's canary users."""

    enabled: bool
    #: canary users, each a seeded coin of bias ``member_prob``
    m: int
    #: rows per user (k), each its own random prefix before the user's secret token
    rows: int
    member_prob: float
    prefix_length: int
    seed: int

    def problems(self):
        return (check(not self.enabled or self.m >= 1000, "m", "must be >= 1000 canary users (the user-level "
                      "test's power: 100 right guesses of 100 show at most 3.47 at delta 1e-5)", self.m)
                + check(self.rows >= 1, "rows", "must be >= 1", self.rows)
                + check(0 < self.member_prob < 1, "member_prob", "must be in (0, 1)", self.member_prob)
                + check(self.prefix_length >= 1, "prefix_length", "must be >= 1", self.prefix_length))


def build_audit_users(params: AuditUsersParams, vocab: Vocab, new_offset: int) -> list[dict]:
    """AUDIT_USERS rows: user u's ``rows`` rows (ids ``audit_users-<u>-<j>``), its secret new token ``new_offset + u``,
    its coin from the ``canaries.audit_users`` stream (coins first, then the prefixes, so the coins do not depend on
    the rows per user)."""
    rng = stream("canaries.audit_users").numpy(params.seed)
    member = rng.random(params.m) < params.member_prob
    prefixes = random_prefixes(params.m * params.rows, params.prefix_length, vocab, rng)
    out = []
    for u in range(params.m):
        for j in range(params.rows):
            i = u * params.rows + j
            out.append({"canary_id": f"{AUDIT_USERS_KIND}-{u:05d}-{j:02d}", "kind": AUDIT_USERS_KIND, "index": i,
                        "prefix_ids": prefixes[i].astype(np.int32).tolist(), "secret_ids": [int(new_offset + u)],
                        "member": bool(member[u]), "prefix_log_freq": 0.0, "secret_log_freq": 0.0, "user": u})
    return out


def audit_users_suite(rows: list[dict], params: AuditUsersParams, alpha: float) -> Suite:
    """Unique ids, the kind, k rows per user all on the user's side, a fair member share over users."""
    import pandas as pd

    frame = pd.DataFrame({"canary_id": [r["canary_id"] for r in rows], "kind": [r["kind"] for r in rows],
                          "user": [r["user"] for r in rows], "member": [float(r["member"]) for r in rows]})
    per_user = frame.groupby("user").agg(rows=("member", "size"), member=("member", "mean")).reset_index()
    lo, hi = member_share_band(params.m, params.member_prob, alpha)
    return Suite(f"canaries_{AUDIT_USERS_KIND}", per_user.assign(ids_unique=frame["canary_id"].is_unique), [
        E("ExpectColumnValuesToBeBetween", {"column": "rows", "min_value": params.rows, "max_value": params.rows}),
        E("ExpectColumnValuesToBeInSet", {"column": "member", "value_set": [0.0, 1.0]}),
        E("ExpectColumnMeanToBeBetween", {"column": "member", "min_value": lo, "max_value": hi}),
        E("ExpectColumnValuesToBeInSet", {"column": "ids_unique", "value_set": [True]}),
    ])


def write_audit_users(params: AuditUsersParams, vocab: Vocab, new_offset: int, out_dir: Path,
                      alpha: float) -> tuple[dict, dict]:
    """Write ``audit_users.parquet``; (its meta.json entry, its GX result)."""
    from ..shared.core.gx import check_suites

    rows = build_audit_users(params, vocab, new_offset)
    name = f"canaries_{AUDIT_USERS_KIND}"
    gx = check_suites([audit_users_suite(rows, params, alpha)], f"canaries.{AUDIT_USERS_KIND}")[name]
    write_table(pa.Table.from_pylist(rows, schema=AUDIT_USERS), Path(out_dir) / AUDIT_USERS_FILE, AUDIT_USERS)
    meta = {"m": params.m, "rows": params.rows, "members": int(sum(r["member"] for r in rows[::params.rows])),
            "prefix_length": params.prefix_length, "new_token_offset": new_offset, "new_tokens": params.m,
            "description": "canary users of k rows sharing a new token of their own, one coin per user (the "
                           "user-level one-run audit)"}
    return meta, gx
