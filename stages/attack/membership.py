"""Membership-inference attacks: each per-example score (``scores.py``: loss, ref_ratio, zlib, min-k%, Min-K%++,
EZ-MIA) registered as an attack on canaries and text rows, and per user on runs with users (``user_inference.py``),
and the contrast scores on canaries (the secret against its kind's other candidate tokens), black- and white-box.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from .registry import register_attack
from .scores import PER_EXAMPLE, THREAT_BLACK_BOX, THREAT_TWO_MODELS, table
from .user_inference import user_rows


# ----------------------------------------------------------------------------- attacks
def per_example(name: str):
    """The attack ``name``: its per-example score on canaries and text rows, and per user on runs with users."""
    def run(ctx, params) -> pa.Table:
        items = ctx.items("canaries", optional=True) + ctx.items("text", optional=True)
        ids, groups, members = [it.item_id for it in items], [it.group for it in items], [it.member for it in items]
        scores = list(PER_EXAMPLE[name](ctx, items, params)) if items else []
        if ctx.has("users") is None:
            users = user_rows(ctx, name, params)
            ids, groups, members, scores = ids + users[0], groups + users[1], members + users[2], scores + users[3]
        return table(ids, groups, members, scores)
    return run


register_attack("loss", "membership", ("canaries|text",),
                "mean log-probability of the labelled tokens (secret given prefix under SFT)",
                threat_model=THREAT_BLACK_BOX)(per_example("loss"))
register_attack("ref_ratio", "membership", ("canaries|text", "reference"),
                "log p_target(x) - log p_reference(x) with the base model as the reference",
                threat_model=THREAT_TWO_MODELS)(per_example("ref_ratio"))
register_attack("zlib", "membership", ("canaries|text",),
                "log p_target(x) / zlib-compressed length of x (Carlini et al. 2021)",
                threat_model=THREAT_BLACK_BOX,
                ranks_like={"new_token": "loss"})(per_example("zlib"))  # every new token decodes to one length
register_attack("min_k", "membership", ("canaries|text",),
                "mean of the k% least likely labelled tokens (Shi et al. 2024; k = attack.min_k)",
                threat_model=THREAT_BLACK_BOX,  # one-token secrets: min-k is the loss
                ranks_like={"new_token": "loss", "random": "loss"})(per_example("min_k"))
register_attack("min_k_pp", "membership", ("canaries|text",),
                "Min-K%++: mean of the k% lowest token log-probabilities standardised by the mean and sd of log p "
                "over the vocabulary at that position (Zhang et al. 2024; k = attack.min_k_pp)",
                threat_model=THREAT_BLACK_BOX + " over the whole vocabulary")(per_example("min_k_pp"))
register_attack("ez_mia", "membership", ("canaries|text", "reference"),
                "EZ-MIA: at the fine-tuned model's error positions (top-1 token wrong), upward over downward shifts "
                "of log p against the base model (Ilić et al. 2026); a row with fewer than attack.ez_min_errors error "
                "positions over all its positions (on a one-token secret: ref_ratio's sign, downward shifts tied at 0)",
                threat_model=THREAT_TWO_MODELS + ", top-1 token")(per_example("ez_mia"))


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
    return table(ids, groups, members, contrast_scores(ctx.contrast("target", items)))


@register_attack("contrast_z", "membership", ("canaries",),
                 "black-box: contrast divided by the spread (sd) of the other candidates' logits at that position",
                 threat_model=THREAT_BLACK_BOX)
def contrast_z(ctx, params) -> pa.Table:
    items, ids, groups, members = _canary_items(ctx)
    return table(ids, groups, members, contrast_scores(ctx.contrast("target", items), "z"))


@register_attack("contrast_ref", "membership", ("canaries", "reference"),
                 "black-box, two models: contrast under the fine-tuned model minus the same contrast under the "
                 "initial model (base weights, added rows at their initialisation)",
                 threat_model=THREAT_TWO_MODELS)
def contrast_ref(ctx, params) -> pa.Table:
    items, ids, groups, members = _canary_items(ctx)
    return table(ids, groups, members, contrast_scores(ctx.contrast("target", items))
                  - contrast_scores(ctx.contrast("reference", items)))


@register_attack("whitebox", "membership", ("canaries", "reference", "initial_rows"),
                 "white-box (reads weights and hidden states): the change of the secret's own output row since "
                 "initialisation, minus its kind's mean change, projected on the unit hidden state at its position "
                 "under the initial model (the direction its clipped gradient pointed when training began)",
                 threat_model="white-box weights")
def whitebox(ctx, params) -> pa.Table:
    items, ids, groups, members = _canary_items(ctx)
    return table(ids, groups, members, whitebox_scores(ctx, items))


def whitebox_scores(ctx, items) -> np.ndarray:
    """Per canary: mean over its secret positions of (dW_s - mean_j dW_j) . h0 / |h0|, dW = trained minus initial
    output row, j over the kind's other secret tokens; h0 from the initial model's pass (``ctx.contrast``)."""
    import torch

    from ..shared.lm.scoring import output_rows

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
