"""What the audit needs to explain its own numbers, recorded by the fine-tune (auditor-side records: they name
member canaries, so they are the auditor's, never part of a released model).

* how many steps' Poisson batches sampled each pool example: counted by the loop as it draws them (a seeded run's
  counts equal ``sampling.inclusion_counts``' replay of the sampler);
* ``canary_gradients``: at the initial model, each sampled canary's per-example gradient norm before clipping
  and the share of its squared norm that lies in the secret token's own rows (new-token or secret rows): how
  much of a clipped canary step can reach the coordinates a canary score reads.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..shared.lm.batching import collate
from ..shared.lm.examples import Example
from .loss import per_sample_losses


def own_row_slices(model, token: int) -> list[tuple[torch.nn.Parameter, int]]:
    """(parameter, row) pairs that belong to ``token`` alone: its new-token rows or its secret rows."""
    if token >= model.base_vocab and model.num_new:
        return [(model.new_head.weight, token - model.base_vocab), (model.new_embed.weight, token - model.base_vocab)]
    if model.num_rows and int(model.row_index[token]) >= 0:
        row = int(model.row_index[token])
        return [(model.row_head.weight, row), (model.row_embed.weight, row)]
    return []


def canary_gradients(model, examples: Sequence[Example], kinds: Sequence[str], pad_id: int, clip_norm: float,
                     per_kind: int, seed: int) -> dict:
    """Per kind, over a seeded sample of ``per_kind`` canaries: the per-example gradient norm at the initial model
    (median, 10% and 90%), the share clipped at ``clip_norm``, and the median share of the squared norm in the
    secret tokens' own rows. One plain backward pass per canary (no DP wrapper: a diagnostic, not training)."""
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    rng = np.random.default_rng(seed)
    out = {}
    for kind in sorted(set(kinds)):
        idx = [i for i, k in enumerate(kinds) if k == kind]
        pick = sorted(rng.choice(len(idx), size=min(per_kind, len(idx)), replace=False).tolist())
        norms, shares = [], []
        for j in pick:
            e = examples[idx[j]]
            loss = per_sample_losses(model, collate([e], pad_id, device)).sum()
            grads = dict(zip([id(p) for p in params], torch.autograd.grad(loss, params, allow_unused=True)))
            total = sum(float((g.double() ** 2).sum()) for g in grads.values() if g is not None)
            own = 0.0
            for t in sorted({int(x) for x in e.labels[e.labels >= 0]}):
                for p, row in own_row_slices(model, t):
                    g = grads.get(id(p))
                    own += float((g[row].double() ** 2).sum()) if g is not None else 0.0
            norms.append(total ** 0.5)
            shares.append(own / total if total > 0 else 0.0)
        norms_a = np.asarray(norms)
        out[kind] = {"canaries": len(pick), "clip_norm": clip_norm,
                     "norm_median": float(np.median(norms_a)), "norm_p10": float(np.percentile(norms_a, 10)),
                     "norm_p90": float(np.percentile(norms_a, 90)),
                     "clipped_share": float(np.mean(norms_a > clip_norm)),
                     "own_rows_share_median": float(np.median(shares)),
                     "own_rows_share_p10": float(np.percentile(shares, 10))}
    return out
