"""torch's Linear: opacus ships its grad and norm samplers (the norm from the (T, T) Gram matrices of a and g).

Book-keeping: W += sum_i c_i g_i^T a_i, b += sum_i c_i g_i (also over positions); the weight gradient is a
product the ghost norm pass need not form.
"""
from __future__ import annotations

import torch
from torch import nn

from ..layer import LayerType, register_layer


def affine_sum(layer: nn.Module, a: torch.Tensor, g: torch.Tensor, in_out: bool = False) -> dict:
    """Linear (weight (out, in): sum_i g_i^T a_i) or, ``in_out``, a weight stored (in, out) (transformers' Conv1D);
    the bias sum_i g_i."""
    a, g = a.reshape(-1, a.shape[-1]).float(), g.reshape(-1, g.shape[-1]).float()
    out = {}
    if layer.weight.requires_grad:
        out[layer.weight] = a.T @ g if in_out else g.T @ a
    if layer.bias is not None and layer.bias.requires_grad:
        out[layer.bias] = g.sum(0)
    return out


register_layer(LayerType("linear", matches=lambda m: isinstance(m, nn.Linear), clipped_sum=affine_sum,
                         weight_from_output=True))
