"""transformers' ``Conv1D`` (GPT-2's attention and MLP): y = x @ W + b with W of shape (in, out), a Linear with its
weight transposed.

* grad sampler: the per-example gradient of W is the sum over positions of a^T g, of b the sum of g;
* norm sampler: the Linear one's ghost norm, ||a^T g||_F^2 = <a a^T, g g^T> over positions (no per-example
  gradient);
* book-keeping: W += sum_i c_i a_i^T g_i (the Linear form transposed), b as Linear; the weight gradient is a
  product the ghost norm pass need not form.
"""
from __future__ import annotations

import functools

import torch
from torch import nn

from ..layer import LayerType, register_layer
from .linear import affine_sum


def conv1d_grad_sample(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    """Per-example gradients of a ``Conv1D`` (y = x @ W + b, W (in, out)): W -> (B, in, out), b -> (B, out)."""
    a = activations[0].to(backprops.dtype)
    out = {}
    if layer.weight.requires_grad:
        out[layer.weight] = torch.einsum("n...i,n...j->nij", a, backprops)
    if layer.bias is not None and layer.bias.requires_grad:
        out[layer.bias] = torch.einsum("n...k->nk", backprops)
    return out


def conv1d_norm_sample(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    """Per-example gradient norms of a ``Conv1D`` without its per-example gradients (ghost norm, as opacus'
    Linear norm sampler: ||a^T g||_F^2 = <a a^T, g g^T> over positions)."""
    a = activations[0].to(backprops.dtype)
    g = backprops
    if g.dim() == 2:  # one position per example
        a, g = a.unsqueeze(1), g.unsqueeze(1)
    a, g = a.reshape(len(a), -1, a.shape[-1]), g.reshape(len(g), -1, g.shape[-1])
    out = {}
    if layer.weight.requires_grad:
        ggT = torch.einsum("nik,njk->nij", g, g)
        aaT = torch.einsum("nik,njk->nij", a, a)
        out[layer.weight] = torch.einsum("nij,nij->n", ggT, aaT).clamp(min=0).sqrt()
    if layer.bias is not None and layer.bias.requires_grad:
        out[layer.bias] = g.sum(1).norm(2, dim=-1)
    return out


def _conv1d_class():
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # pragma: no cover - transformers is a dependency
        return None
    return Conv1D


def is_conv1d(module: nn.Module) -> bool:
    """transformers' ``Conv1D`` (or a subclass computing the same y = x @ W + b)."""
    cls = _conv1d_class()
    return cls is not None and isinstance(module, cls) and type(module).forward is cls.forward


register_layer(LayerType("conv1d", matches=is_conv1d, clipped_sum=functools.partial(affine_sum, in_out=True),
                         grad_sampler=conv1d_grad_sample, norm_sampler=conv1d_norm_sample, weight_from_output=True))
