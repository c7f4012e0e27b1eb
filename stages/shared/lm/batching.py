"""Length-bucketed chunks: pad within a chunk of similar lengths, at most ``max_batch`` rows each.

Canaries (a dozen tokens) and dialogue rows (~64 tokens) never share a padded batch, so a logical
(Poisson) batch costs about what its real tokens cost. Chunk order follows the input order of
buckets, so results are deterministic.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .examples import IGNORE, Example


def chunks(indices: Sequence[int], lengths: Sequence[int], max_batch: int, granularity: int = 8) -> list[list[int]]:
    buckets: dict[int, list[int]] = {}
    for i in indices:
        buckets.setdefault(-(-lengths[i] // granularity), []).append(int(i))
    out = []
    for key in sorted(buckets):
        items = buckets[key]
        for s in range(0, len(items), max_batch):
            out.append(items[s:s + max_batch])
    return out


def collate(examples: Sequence[Example], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Right-padded input_ids/attention_mask for positions 0..T-2 and the targets they predict.

    Returns ``rows``/``cols``/``targets`` of the labelled positions (K of them) and ``owner`` (which
    example each belongs to), so the output layer runs on those K positions only.
    """
    T = max(len(e) for e in examples)
    B = len(examples)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    labels = np.full((B, T), IGNORE, dtype=np.int64)
    mask = np.zeros((B, T), dtype=np.int64)
    for b, e in enumerate(examples):
        ids[b, : len(e)] = e.ids
        labels[b, : len(e)] = e.labels
        mask[b, : len(e)] = 1
    # position t predicts token t+1: inputs are ids[:, :-1], targets labels[:, 1:]
    tgt = labels[:, 1:]
    rows, cols = np.nonzero(tgt != IGNORE)
    return {
        "input_ids": torch.from_numpy(ids[:, :-1]).to(device),
        "attention_mask": torch.from_numpy(mask[:, :-1]).to(device),
        "rows": torch.from_numpy(rows).to(device),
        "cols": torch.from_numpy(cols).to(device),
        "targets": torch.from_numpy(tgt[rows, cols]).to(device),
        "batch_size": B,
    }
