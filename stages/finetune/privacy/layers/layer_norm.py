"""torch's LayerNorm (GPT-2, GPT-NeoX): opacus ships the grad sampler, not the norm sampler.

The per-example gradients of w and b (sums over positions of g * n(x) and of g, with n the normalisation without
affine) are (B, d): the norm sampler computes them and takes their norms; book-keeping sums them over examples.
The grad sampler below is registered only where opacus has none for the class.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layer import LayerType, norms, register_layer, summed


def layer_norm_grad_sample(layer: nn.LayerNorm, activations: list[torch.Tensor], backprops: torch.Tensor):
    """Per-example gradients of a LayerNorm's weight and bias: sum over positions of g * n(x), and of g."""
    x = activations[0]
    dims = tuple(range(1, x.dim() - len(layer.normalized_shape)))  # the positions between batch and features
    out = {}
    if layer.weight is not None and layer.weight.requires_grad:
        normed = F.layer_norm(x.float(), layer.normalized_shape, eps=layer.eps).to(x.dtype).float()
        gs = backprops.float() * normed
        out[layer.weight] = (gs.sum(dims) if dims else gs).to(layer.weight.dtype)
    if layer.bias is not None and layer.bias.requires_grad:
        gs = backprops.float()
        out[layer.bias] = (gs.sum(dims) if dims else gs).to(layer.bias.dtype)
    return out


def layer_norm_norm_sample(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    return norms(layer_norm_grad_sample(layer, activations, backprops))


def layer_norm_sum(layer: nn.LayerNorm, x: torch.Tensor, g: torch.Tensor) -> dict:
    return summed(layer_norm_grad_sample(layer, [x], g))  # (B, d) -> (d,)


def is_layer_norm(module: nn.Module) -> bool:
    """torch's LayerNorm (or a subclass computing the same)."""
    return isinstance(module, nn.LayerNorm) and type(module).forward is nn.LayerNorm.forward


register_layer(LayerType("layer_norm", matches=is_layer_norm, clipped_sum=layer_norm_sum,
                         grad_sampler=layer_norm_grad_sample, norm_sampler=layer_norm_norm_sample))
