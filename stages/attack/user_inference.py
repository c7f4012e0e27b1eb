"""User inference (Kandpal et al. 2023): is a person's data in the training set? A user's score is the mean, over the
attacker's held-back samples of that user, of a per-example score (``attack.user_score``; Kandpal et al., section 3,
use the log-likelihood ratio log p_target(x) - log p_reference(x), ``ref_ratio``). Every per-example membership attack
also scores users this way on runs with users (``user_rows``), and ``user_inference`` is the attack that scores users
only.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from .registry import register_attack
from .scores import PER_EXAMPLE, THREAT_TWO_MODELS, ratio_scores, table


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


def user_rows(ctx, score: str, params) -> tuple[list, list, list, list]:
    """(users, groups, members, scores): per user the mean of per-example ``score`` over the attacker's samples."""
    items = ctx.items("users")
    scores = per_user([it.user for it in items], PER_EXAMPLE[score](ctx, items, params))
    member = {it.user: it.member for it in items}
    group = {it.user: it.group for it in items}  # "users" or "canary_users"
    users = list(scores)
    return users, [group[u] for u in users], [member[u] for u in users], [scores[u] for u in users]


@register_attack("user_inference", "membership", ("users", "reference"),
                 "mean over a user's attacker samples of a per-example score (attack.user_score; Kandpal et al.'s "
                 "log p_target(x) - log p_reference(x) is ref_ratio)",
                 threat_model=THREAT_TWO_MODELS)
def user_inference(ctx, params) -> pa.Table:
    return table(*user_rows(ctx, params.user_score, params))
