"""Membership-inference family: loss (Yeom et al. 2018), reference-model ratio (base model as the
reference), zlib ratio (Carlini et al. 2021), min-k% (Shi et al. 2024), Min-K%++ (Zhang et al. 2024), EZ-MIA
(Ilić, Stanojević and Cvejoski 2026), and user inference (the mean over a user's held-back samples of a per-example
score; Kandpal et al. 2023, section 3, use the log-likelihood ratio, ``attack.user_score: ref_ratio``).

Every per-example attack scores canaries, text rows and, on runs with users, users (each user the mean of the
per-example score over the attacker's samples of that user, as user inference aggregates).

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
    upward shifts against the downward ones (Ilić et al. 2026, eq. 2). Fewer than ``min_errors`` error positions: 0
    (no evidence). Upward shifts only (no downward one): sum / 1e-12, above every finite ratio (the paper's code
    returns 0 there, which would rank the most one-sided example as the least member-like)."""
    d = (lp - ref)[~top1]
    if len(d) < min_errors:
        return 0.0
    return float(d[d > 0].sum() / (-d[d < 0].sum() + 1e-12))


def ez_scores(target, reference: Sequence[np.ndarray], min_errors: int) -> np.ndarray:
    return np.array([ez_score(t.logprobs, t.top1, r, min_errors) for t, r in zip(target, reference)])


def per_user(users: Sequence[str], scores: np.ndarray) -> dict[str, float]:
    """Per user (sorted): the mean of the per-example ``scores`` over the user's samples."""
    by_user: dict[str, list[float]] = {}
    for u, x in zip(users, scores):
        by_user.setdefault(u, []).append(float(x))
    return {u: float(np.mean(v)) for u, v in sorted(by_user.items())}


def user_scores(users: Sequence[str], target: Sequence[np.ndarray],
                reference: Sequence[np.ndarray]) -> dict[str, float]:
    """Per user: mean over the user's samples of log p_target(x) - log p_reference(x) (Kandpal et al.'s statistic)."""
    return per_user(users, ratio_scores(target, reference))


# ----------------------------------------------------------------------------- attacks
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


def _table(ids, groups, members, scores) -> pa.Table:
    return pa.Table.from_pylist([{"item_id": i, "group": g, "member": bool(m), "score": float(s)}
                                 for i, g, m, s in zip(ids, groups, members, scores)], schema=SCORES)


def user_rows(ctx, score: str, params) -> tuple[list, list, list, list]:
    """(users, groups, members, scores): per user the mean of per-example ``score`` over the attacker's samples."""
    items = ctx.items("users")
    scores = per_user([it.user for it in items], PER_EXAMPLE[score](ctx, items, params))
    member = {it.user: it.member for it in items}
    group = {it.user: it.group for it in items}  # "users" or "canary_users"
    users = list(scores)
    return users, [group[u] for u in users], [member[u] for u in users], [scores[u] for u in users]


def per_example(name: str):
    """The attack ``name``: its per-example score on canaries and text rows, and per user on runs with users."""
    def run(ctx, params) -> pa.Table:
        items = ctx.items("canaries", optional=True) + ctx.items("text", optional=True)
        ids, groups, members = [it.item_id for it in items], [it.group for it in items], [it.member for it in items]
        scores = list(PER_EXAMPLE[name](ctx, items, params)) if items else []
        if ctx.has("users") is None:
            users = user_rows(ctx, name, params)
            ids, groups, members, scores = ids + users[0], groups + users[1], members + users[2], scores + users[3]
        return _table(ids, groups, members, scores)
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
                "of log p against the base model (Ilić et al. 2026; at least attack.ez_min_errors positions)",
                threat_model=THREAT_TWO_MODELS + ", top-1 token")(per_example("ez_mia"))


@register_attack("user_inference", "membership", ("users", "reference"),
                 "mean over a user's attacker samples of a per-example score (attack.user_score; Kandpal et al.'s "
                 "log p_target(x) - log p_reference(x) is ref_ratio)",
                 threat_model=THREAT_TWO_MODELS)
def user_inference(ctx, params) -> pa.Table:
    return _table(*user_rows(ctx, params.user_score, params))


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
