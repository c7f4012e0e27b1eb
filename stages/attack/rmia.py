"""RMIA with reference models (Zarifzadeh et al., ICML 2024), offline: K reference fine-tunes of the run's recipe on
population rows that are never members (``stages.reference``), no model trained with x.

Pr(x | theta) is the sequence likelihood, taken token by token: per labelled token t,
Pr(x_t) = (1 + a) / 2 * mean_k p_k(x_t | x_<t) + (1 - a) / 2 (the paper's offline approximation of the mean over IN and
OUT models from OUT models only, ``attack.rmia_a``), and the score is
log Pr(x | theta) - sum_t log Pr(x_t). RMIA's own score compares this ratio with the ratios of population samples z,
Pr_z[LR(x) / LR(z) > gamma]: for a fixed set of z that is a non-decreasing function of LR(x), so every threshold metric
we report (AUROC, TPR at a fixed FPR) is the same for both; we report LR(x) and draw no z.

With one reference, a = 1 and the base model as that reference, the score is ``ref_ratio``'s (Privacy Meter #139).
The mixture is taken per token, not over whole sequences: a sequence's probability (about e^-100) would leave only
the constant (1 - a) / 2, and the score would rank as the loss.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from .registry import register_attack
from .scores import table


def rmia_scores(target: Sequence[np.ndarray], references: Sequence[Sequence[np.ndarray]], a: float) -> np.ndarray:
    """Per item: sum_t log p_target(x_t) - sum_t log((1 + a)/2 * mean_k p_k(x_t) + (1 - a)/2); ``references[k][i]``
    the k-th reference model's token log-probabilities of item i."""
    out = []
    for i, t in enumerate(target):
        ref = np.stack([np.asarray(r[i], dtype=np.float64) for r in references])  # (K, tokens)
        mean = np.exp(ref).mean(0)
        out.append(float(np.sum(t, dtype=np.float64) - np.log((1 + a) / 2 * mean + (1 - a) / 2).sum()))
    return np.asarray(out)


@register_attack("rmia", "membership", ("text", "references"),
                 "offline RMIA: log p_target(x) against the mean likelihood of K reference fine-tunes of the run's "
                 "recipe on never-member population rows, with the offline correction a (Zarifzadeh et al. 2024)",
                 threat_model="black-box log-probabilities, population data and K reference fine-tunes of the recipe")
def rmia(ctx, params) -> pa.Table:
    items = ctx.items("text")
    refs = [ctx.scores_of(name, items) for name in ctx.reference_sets]
    scores = rmia_scores(ctx.target(items), refs, params.rmia_a)
    return table([it.item_id for it in items], [it.group for it in items], [it.member for it in items], scores)
