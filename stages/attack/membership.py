"""Membership-inference family: loss (Yeom et al. 2018), reference-model ratio (base model as the
reference), zlib ratio (Carlini et al. 2021), min-k% (Shi et al. 2024), and user inference (the
mean log-likelihood ratio over a user's held-back samples, user-inference-attacks section 3).

Scores follow the training objective (privacy-auditing-of-llms section 3.1): under SFT only the
secret (or reply) tokens count, under NWP the whole sequence does. The reducers below are pure
functions of the cached per-token log-probabilities; the registered attacks wire them to a run.
"""
from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np
import pyarrow as pa

from .registry import register_attack
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


def user_scores(users: Sequence[str], target: Sequence[np.ndarray],
                reference: Sequence[np.ndarray]) -> dict[str, float]:
    """Per user: mean over the user's samples of log p_target(x) - log p_reference(x)."""
    by_user: dict[str, list[float]] = {}
    for u, x in zip(users, ratio_scores(target, reference)):
        by_user.setdefault(u, []).append(float(x))
    return {u: float(np.mean(v)) for u, v in sorted(by_user.items())}


# ----------------------------------------------------------------------------- attacks
def _table(ids, groups, members, scores) -> pa.Table:
    return pa.Table.from_pylist([{"item_id": i, "group": g, "member": bool(m), "score": float(s)}
                                 for i, g, m, s in zip(ids, groups, members, scores)], schema=SCORES)


def _items(ctx):
    items = ctx.items("canaries", optional=True) + ctx.items("text", optional=True)
    return items, [it.item_id for it in items], [it.group for it in items], [it.member for it in items]


@register_attack("loss", "membership", ("canaries|text",),
                 "mean log-probability of the labelled tokens (secret given prefix under SFT)",
                 threat_model=THREAT_BLACK_BOX)
def loss(ctx, params) -> pa.Table:
    items, ids, groups, members = _items(ctx)
    return _table(ids, groups, members, loss_scores(ctx.target(items)))


@register_attack("ref_ratio", "membership", ("canaries|text", "reference"),
                 "log p_target(x) - log p_reference(x) with the base model as the reference",
                 threat_model=THREAT_TWO_MODELS)
def ref_ratio(ctx, params) -> pa.Table:
    items, ids, groups, members = _items(ctx)
    return _table(ids, groups, members, ratio_scores(ctx.target(items), ctx.reference(items)))


@register_attack("zlib", "membership", ("canaries|text",),
                 "log p_target(x) / zlib-compressed length of x (Carlini et al. 2021)",
                 threat_model=THREAT_BLACK_BOX,
                 ranks_like={"new_token": "loss"})  # every new token decodes to a string of one length
def zlib_ratio(ctx, params) -> pa.Table:
    items, ids, groups, members = _items(ctx)
    return _table(ids, groups, members, zlib_scores(ctx.target(items), [it.text for it in items]))


@register_attack("min_k", "membership", ("canaries|text",),
                 "mean of the k% least likely labelled tokens (Shi et al. 2024; k = attack.min_k)",
                 threat_model=THREAT_BLACK_BOX,
                 ranks_like={"new_token": "loss", "random": "loss"})  # one-token secrets: min-k is the loss
def min_k_attack(ctx, params) -> pa.Table:
    items, ids, groups, members = _items(ctx)
    return _table(ids, groups, members, min_k_scores(ctx.target(items), params.min_k))


@register_attack("user_inference", "membership", ("users", "reference"),
                 "mean over a user's attacker samples of log p_target(x) - log p_reference(x)",
                 threat_model=THREAT_TWO_MODELS)
def user_inference(ctx, params) -> pa.Table:
    items = ctx.items("users")
    scores = user_scores([it.user for it in items], ctx.target(items), ctx.reference(items))
    member = {it.user: it.member for it in items}
    group = {it.user: it.group for it in items}  # "users" or "canary_users"
    users = list(scores)
    return _table(users, [group[u] for u in users], [member[u] for u in users], [scores[u] for u in users])


# ----------------------------------------------------------------------------- contrast scores (canaries)
# A canary's loss mostly ranks where it started (its random prefix sets the new token's initial log-probability,
# sd ~1.2 nats on SmolLM2), not how training moved it. These scores read the secret token against the other
# candidate tokens of its kind (every secret token of that kind's canaries) at the same position, so the part
# of the logit that every candidate shares (the softmax normaliser, the hidden state's common direction) cancels.
def contrast_scores(rows: Sequence[np.ndarray], field: str = "contrast") -> np.ndarray:
    """Mean over the secret positions of a ``lm.scoring.CONTRAST_FIELDS`` reduction (rows: ``ctx.contrast``)."""
    if field == "contrast":
        return np.array([float(r[:, 0].mean()) for r in rows])
    if field == "z":
        return np.array([float(np.mean(r[:, 0] / np.maximum(r[:, 1], 1e-12))) for r in rows])
    if field == "final_whitebox":  # the same projection on the fine-tuned model's own hidden state (a weaker proxy)
        return np.array([float(np.mean((r[:, 0] - r[:, 3]) / np.maximum(r[:, 2], 1e-12))) for r in rows])
    raise ValueError(f"unknown contrast field {field!r}")


def _canary_items(ctx):
    items = ctx.items("canaries")
    return items, [it.item_id for it in items], [it.group for it in items], [it.member for it in items]


@register_attack("contrast", "membership", ("canaries",),
                 "black-box: the secret's logit minus the mean logit of its kind's other secret tokens at the same "
                 "position (a difference of log-probabilities)",
                 threat_model=THREAT_BLACK_BOX)
def contrast(ctx, params) -> pa.Table:
    items, ids, groups, members = _canary_items(ctx)
    return _table(ids, groups, members, contrast_scores(ctx.contrast("target", items)))


@register_attack("contrast_z", "membership", ("canaries",),
                 "black-box: contrast divided by the spread (sd) of the other candidates' logits at that position",
                 threat_model=THREAT_BLACK_BOX)
def contrast_z(ctx, params) -> pa.Table:
    items, ids, groups, members = _canary_items(ctx)
    return _table(ids, groups, members, contrast_scores(ctx.contrast("target", items), "z"))


@register_attack("contrast_ref", "membership", ("canaries", "reference"),
                 "black-box, two models: contrast under the fine-tuned model minus the same contrast under the "
                 "initial model (base weights, added rows at their initialisation)",
                 threat_model=THREAT_TWO_MODELS)
def contrast_ref(ctx, params) -> pa.Table:
    items, ids, groups, members = _canary_items(ctx)
    return _table(ids, groups, members, contrast_scores(ctx.contrast("target", items))
                  - contrast_scores(ctx.contrast("reference", items)))


@register_attack("whitebox", "membership", ("canaries", "reference", "initial_rows"),
                 "white-box (reads weights and hidden states): the change of the secret's own output row since "
                 "initialisation, minus its kind's mean change, projected on the unit hidden state at its position "
                 "under the initial model (the direction its clipped gradient pointed when training began)",
                 threat_model="white-box weights")
def whitebox(ctx, params) -> pa.Table:
    items, ids, groups, members = _canary_items(ctx)
    return _table(ids, groups, members, whitebox_scores(ctx, items))


def whitebox_scores(ctx, items) -> np.ndarray:
    """Per canary: mean over its secret positions of (dW_s - mean_j dW_j) . h0 / |h0|, dW = trained minus initial
    output row, j over the kind's other secret tokens; h0 from the initial model's pass (``ctx.contrast``)."""
    import torch

    from ..lm.scoring import output_rows

    hidden = ctx.contrast("reference", items, hidden=True)
    target, reference = ctx.target_model, ctx.reference_model
    delta: dict[int, tuple] = {}  # id of the kind's candidate array -> (ids, dW rows, their sum)
    out = []
    with torch.no_grad():
        for it, h0 in zip(items, hidden):
            key = id(it.candidates)
            if key not in delta:
                d = output_rows(target, it.candidates) - output_rows(reference, it.candidates)
                delta[key] = ({int(t): n for n, t in enumerate(it.candidates)}, d, d.sum(0))
            pos, d, total = delta[key]
            secret = it.example.ids[it.example.labels != -100][-it.secret_tokens:]
            vals = []
            for t, h in zip(secret.tolist(), h0):
                own = d[pos[t]]
                rest = (total - own) / max(len(pos) - 1, 1)
                vals.append(float((own - rest) @ torch.as_tensor(h, dtype=own.dtype, device=own.device)))
            out.append(float(np.mean(vals)))
    return np.asarray(out)
