"""The run's manifest (``schema.MANIFEST``): what the fine-tune drew and trained on, as facts.

One row per candidate of the run's membership game: the text pairs it trained on and the held-out pairs it is
compared with (``text``), every token canary of the run's kinds (``canary``), every secret-sharer candidate
(``formatted``), every user of a user-level dataset (``user``: held in or out) and the real secrets the
memorization attacks may score (``secret``: trained arm or control). ``inclusions`` is how many steps sampled
the candidate (Poisson draws, or its fixed schedule; summed over a secret-sharer canary's repetitions); null for
users and secrets, which are not examples, and for a model trained elsewhere, whose sampling we did not see.
"""
from __future__ import annotations

import numpy as np

from .schema import write_manifest


def _row(source: str, cid: str, group: str, member: bool, rank: int, inclusions: int | None,
         pair: tuple[str, str] | None = None) -> dict:
    return {"source": source, "candidate_id": cid, "group": group, "member": bool(member), "rank": rank,
            "inclusions": None if inclusions is None else int(inclusions),
            "prompt": pair[0] if pair else None, "target": pair[1] if pair else None}


def text_rows(inputs, counts: np.ndarray | None) -> list[dict]:
    out = [_row("text", f"text-member-{i:05d}", "text", True, i, None if counts is None else counts[i], p)
           for i, p in enumerate(inputs.text_pairs)]
    return out + [_row("text", f"text-heldout-{i:05d}", "text", False, i, None if counts is None else 0, p)
                  for i, p in enumerate(inputs.heldout_pairs)]


def formatted_rows(inputs, counts: np.ndarray | None) -> list[dict]:
    """Secret-sharer candidates; an inserted one's repetitions follow the text rows in the pool."""
    out, at = [], len(inputs.text)
    for i, r in enumerate(inputs.formatted_rows or []):
        n = r["repetitions"] if r["inserted"] else 0
        seen = None if counts is None else int(counts[at:at + n].sum())
        out.append(_row("formatted", r["canary_id"], r["format"], r["inserted"], i, seen))
        at += n
    return out


def canary_rows(inputs, counts: np.ndarray | None) -> list[dict]:
    """Token canaries of the run's kinds, members or not; members sit after the pool (a fixed schedule) or after
    the text and secret-sharer rows in it (Poisson-sampled)."""
    first = len(inputs.pool) if inputs.scheduled else len(inputs.text) + len(inputs.formatted)
    position = {cid: first + i for i, cid in enumerate(inputs.canary_ids)}
    out = []
    for kind, rows in inputs.all_canaries.items():
        for i, r in enumerate(rows):
            seen = None if counts is None else (int(counts[position[r["canary_id"]]]) if r["member"] else 0)
            out.append(_row("canary", r["canary_id"], kind, r["member"], i, seen))
    return out


def manifest_of(inputs, counts: np.ndarray | None) -> list[dict]:
    """Every row of the run's manifest; ``counts``: steps that sampled each example (pool, then scheduled), or
    None when the pipeline did not train the model."""
    users = [_row("user", u, "canary_users" if u in inputs.canary_users else "users", held_in, i, None)
             for i, (u, held_in) in enumerate(sorted(inputs.users.items()))]
    secrets = [_row("secret", s["secret_id"], s["kind"], trained, i, None)
               for i, (s, trained) in enumerate(inputs.secret_arms)]
    return (text_rows(inputs, counts) + canary_rows(inputs, counts) + formatted_rows(inputs, counts) + users
            + secrets)


def write_run_manifest(out_dir, inputs, counts: np.ndarray | None) -> list[dict]:
    rows = manifest_of(inputs, counts)
    write_manifest(out_dir, rows)
    return rows
