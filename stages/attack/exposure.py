"""Exposure of secret-sharer canaries (Carlini et al. 2019; privlm-bench App. B.2).

For every candidate fill r of a format, the log-perplexity Px(s[r]) = -log2 p(s[r]) of the whole
sentence; rank(s[r]) = |{r' in R : Px(s[r']) <= Px(s[r])}|; exposure = log2|R| - log2 rank. An
inserted canary is *exposed* when its log-perplexity is below that of every non-inserted candidate
of its format; the exposure rate (the audit stage's summary) is the share of inserted canaries exposed.
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from .registry import register_attack
from .schema import EXPOSURE


def exposures(log_perplexity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rank, exposure) of each candidate among all of them (exact ranks, ties share the worse rank)."""
    px = np.asarray(log_perplexity, dtype=np.float64)
    rank = np.searchsorted(np.sort(px), px, side="right")
    return rank, math.log2(len(px)) - np.log2(rank)


@register_attack("exposure", "exposure", ("formatted",),
                 "exact rank of each inserted fill among all candidates of its format, by log-perplexity",
                 threat_model="black-box log-probabilities")
def exposure(ctx, params) -> pa.Table:
    items = ctx.items("formatted")
    bits = np.array([-float(lp.sum()) / math.log(2) for lp in ctx.target(items)])
    rows = []
    fmts = np.array([it.group for it in items])
    for fmt in sorted(set(fmts)):
        sel = np.flatnonzero(fmts == fmt)
        rank, exp = exposures(bits[sel])
        for j, i in enumerate(sel):
            it = items[i]
            rows.append({"canary_id": it.item_id, "format": fmt, "inserted": bool(it.member),
                         "repetitions": it.repetitions, "log_perplexity": float(bits[i]), "rank": int(rank[j]),
                         "exposure": float(exp[j])})
    return pa.Table.from_pylist(rows, schema=EXPOSURE)
