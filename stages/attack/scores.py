"""Per-example membership scores, pure functions of the cached per-token log-probabilities: loss (Yeom et al. 2018),
reference-model ratio (base model as the reference), zlib ratio (Carlini et al. 2021), min-k% (Shi et al. 2024),
Min-K%++ (Zhang et al. 2024), EZ-MIA (Ilić, Stanojević and Cvejoski 2026); ``PER_EXAMPLE`` wires each to a run's
items, and ``table`` writes any attack's scores as the stage's SCORES table.

Scores follow the training objective (privacy-auditing-of-llms section 3.1): under SFT only the
secret (or reply) tokens count, under NWP the whole sequence does.
"""
from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np
import pyarrow as pa

from .schema import SCORES

THREAT_BLACK_BOX = "black-box log-probabilities"
THREAT_TWO_MODELS = "black-box log-probabilities, two models"


# ----------------------------------------------------------------------------- reducers
def loss_scores(target: Sequence[np.ndarray]) -> np.ndarray:
    return np.array([float(np.mean(lp)) for lp in target])


def ratio_scores(target: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> np.ndarray:
    """log p_target(x) - log p_reference(x) (sequence log-likelihood ratio)."""
    return np.array([float(t.sum() - r.sum()) for t, r in zip(target, reference)])


def zlib_bytes(text: str) -> int:
    return len(zlib.compress(text.encode("utf-8")))


def zlib_scores(target: Sequence[np.ndarray], texts: Sequence[str]) -> np.ndarray:
    """log p_target(x) / zlib-compressed length of x in bytes."""
    return np.array([float(lp.sum()) / max(1, zlib_bytes(t)) for lp, t in zip(target, texts)])


def min_k(lp: np.ndarray, k: float) -> float:
    n = max(1, int(np.ceil(len(lp) * k)))
    return float(np.sort(lp)[:n].mean())


def min_k_scores(target: Sequence[np.ndarray], k: float) -> np.ndarray:
    return np.array([min_k(lp, k) for lp in target])


def min_k_pp(lp: np.ndarray, mean: np.ndarray, sd: np.ndarray, k: float) -> float:
    """Min-K%++: the mean of the k% lowest (log p(x_t) - mu_t) / sigma_t, mu_t and sigma_t the mean and standard
    deviation of log p(z) over the vocabulary with z ~ p(. | x_<t) (Zhang et al. 2024, eq. 3)."""
    return min_k((lp - mean) / np.maximum(sd, 1e-12), k)


def min_k_pp_scores(target, k: float) -> np.ndarray:
    """Per example (``lm.token_stats.TokenScores`` of the fine-tuned model), its Min-K%++ score."""
    return np.array([min_k_pp(t.logprobs, t.vocab_mean, t.vocab_sd, k) for t in target])


def ez_score(lp: np.ndarray, top1: np.ndarray, ref: np.ndarray, min_errors: int) -> float:
    """EZ-MIA's error-zone score: at the labelled positions where the fine-tuned model's top-1 token is not the label
    (its errors), d_t = log p_target(x_t) - log p_reference(x_t); the score is sum(d_t > 0) / |sum(d_t < 0)|, the
    upward shifts against the downward ones (Ilić et al. 2026, eq. 2). Upward shifts only (no downward one):
    sum / 1e-12, above every finite ratio (the paper's code returns 0 there, which would rank the most one-sided
    example as the least member-like).

    Fewer than ``min_errors`` error positions: the same ratio over every labelled position. A row the fine-tuned
    model predicts top-1 throughout is the strongest memorisation; scoring it 0 (no evidence) ranked it lowest.
    On a one-position row (a one-token canary's secret) the score is therefore a thresholded ``ref_ratio``: 0 for
    every downward shift (all tied), d / 1e-12 for an upward one (ranked as ref_ratio ranks them)."""
    d = lp - ref
    zone = d[~top1]
    if len(zone) < min_errors:
        zone = d
    return float(zone[zone > 0].sum() / (-zone[zone < 0].sum() + 1e-12))


def ez_scores(target, reference: Sequence[np.ndarray], min_errors: int) -> np.ndarray:
    return np.array([ez_score(t.logprobs, t.top1, r, min_errors) for t, r in zip(target, reference)])


#: per-example scores by attack name: (ctx, items, params) -> one score per item (higher = more likely a member)
PER_EXAMPLE = {
    "loss": lambda ctx, items, params: loss_scores(ctx.target(items)),
    "ref_ratio": lambda ctx, items, params: ratio_scores(ctx.target(items), ctx.reference(items)),
    "zlib": lambda ctx, items, params: zlib_scores(ctx.target(items), [it.text for it in items]),
    "min_k": lambda ctx, items, params: min_k_scores(ctx.target(items), params.min_k),
    "min_k_pp": lambda ctx, items, params: min_k_pp_scores(ctx.target_tokens(items), params.min_k_pp),
    "ez_mia": lambda ctx, items, params: ez_scores(ctx.target_tokens(items), ctx.reference(items),
                                                   params.ez_min_errors),
}


def table(ids, groups, members, scores) -> pa.Table:
    return pa.Table.from_pylist([{"item_id": i, "group": g, "member": bool(m), "score": float(s)}
                                 for i, g, m, s in zip(ids, groups, members, scores)], schema=SCORES)
