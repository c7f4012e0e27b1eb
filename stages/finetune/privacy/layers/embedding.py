"""torch's Embedding: opacus ships its grad and norm samplers.

Book-keeping: an index-add of c_i g_i at the ids (the padding row stays zero).
"""
from __future__ import annotations

import torch
from torch import nn

from ..layer import LayerType, register_layer


def embedding_sum(layer: nn.Embedding, ids: torch.Tensor, g: torch.Tensor) -> dict:
    if not layer.weight.requires_grad:
        return {}
    w = layer.weight
    grad = torch.zeros(w.shape, device=w.device, dtype=torch.float32)
    grad.index_add_(0, ids.reshape(-1), g.reshape(-1, g.shape[-1]).float())
    if layer.padding_idx is not None:
        grad[layer.padding_idx] = 0
    return {w: grad}


register_layer(LayerType("embedding", matches=lambda m: isinstance(m, nn.Embedding), clipped_sum=embedding_sum))
