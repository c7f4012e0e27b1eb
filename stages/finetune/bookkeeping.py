"""Book-keeping clipping (Bu et al., 2023): ghost clipping's per-example norms and the clipped sum from ONE
backward pass.

opacus' ghost clipping (``ghost``) runs two backward passes: a norm pass, whose hooks give each layer's
activations a and output gradients g to opacus' norm samplers, then a second full backward pass of
sum_i c_i * loss_i to get the clipped sum. The second pass recomputes every output gradient only to form,
per layer, sum_i c_i * grad_i(W), which is a closed form in the (a, g) the norm pass already had:

* Linear: W += sum_i c_i g_i^T a_i, b += sum_i c_i g_i;
* transformers' Conv1D (GPT-2; W is (in, out)): W += sum_i c_i a_i^T g_i (the Linear form transposed), b as Linear;
* Embedding: an index-add of c_i g_i at the ids;
* RMSNorm: w += sum_i c_i g_i * n(a_i), n the RMS normalisation;
* LayerNorm: w += sum_i c_i g_i * n(a_i), n the layer normalisation without affine; b += sum_i c_i g_i

(each sum also over positions).
``bk`` keeps (a, g) from the norm pass (opacus still computes the norms, with its own samplers, so the
clipping coefficients are opacus') and forms those sums directly: no second pass, no per-example gradient.
It costs the memory of every trainable layer's output gradients for one chunk, which ghost frees as it
goes. opacus does not ship it (as of 1.6), hence this module; ``tests/finetune/test_ghost.py`` checks it
against opacus' hooks mode for every paradigm.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
from torch import nn

from .grad_samplers import is_conv1d, is_layer_norm, is_rms_norm, layer_norm_grad_sample, rms_norm_grad_sample


def _affine(layer: nn.Module, a: torch.Tensor, g: torch.Tensor, in_out: bool = False) -> dict:
    """Linear (weight (out, in): sum_i c_i g_i^T a_i) or, ``in_out``, transformers' Conv1D (weight (in, out))."""
    a, g = a.reshape(-1, a.shape[-1]).float(), g.reshape(-1, g.shape[-1]).float()
    out = {}
    if layer.weight.requires_grad:
        out[layer.weight] = a.T @ g if in_out else g.T @ a
    if layer.bias is not None and layer.bias.requires_grad:
        out[layer.bias] = g.sum(0)
    return out


_linear = _affine
_conv1d = functools.partial(_affine, in_out=True)


def _embedding(layer: nn.Embedding, ids: torch.Tensor, g: torch.Tensor) -> dict:
    if not layer.weight.requires_grad:
        return {}
    w = layer.weight
    grad = torch.zeros(w.shape, device=w.device, dtype=torch.float32)
    grad.index_add_(0, ids.reshape(-1), g.reshape(-1, g.shape[-1]).float())
    if layer.padding_idx is not None:
        grad[layer.padding_idx] = 0
    return {w: grad}


def _rms_norm(layer: nn.Module, x: torch.Tensor, g: torch.Tensor) -> dict:
    if not layer.weight.requires_grad:
        return {}
    return {p: gs.float().sum(0) for p, gs in rms_norm_grad_sample(layer, [x], g).items()}  # (B, d) -> (d,)


def _layer_norm(layer: nn.LayerNorm, x: torch.Tensor, g: torch.Tensor) -> dict:
    return {p: gs.float().sum(0) for p, gs in layer_norm_grad_sample(layer, [x], g).items()}  # (B, d) -> (d,)


def weighted_grads(module: nn.Module) -> Callable | None:
    """The closed-form clipped-sum function for ``module``'s type, or None when there is none."""
    if isinstance(module, nn.Linear):
        return _linear
    if isinstance(module, nn.Embedding):
        return _embedding
    if is_rms_norm(module):
        return _rms_norm
    if is_conv1d(module):
        return _conv1d
    if is_layer_norm(module):
        return _layer_norm
    return None


def unsupported(model: nn.Module) -> list[str]:
    """Modules with trainable weights of their own that book-keeping has no closed form for."""
    return [f"{name or 'model'} ({type(m).__name__})" for name, m in model.named_modules()
            if any(p.requires_grad for p in m.parameters(recurse=False)) and weighted_grads(m) is None]


class Ledger:
    """Installed on an opacus ``GradSampleModuleFastGradientClipping``: its norm samplers, looked up on the
    instance, are wrapped so that each call also records (module, activations, output gradients)."""

    def __init__(self, net) -> None:
        self.entries: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []
        self.recording = False
        base = type(net).NORM_SAMPLERS
        net.NORM_SAMPLERS = {t: self._wrap(fn) for t, fn in base.items()}

    def _wrap(self, fn):
        def sampler(module, activations, backprops):
            if self.recording:
                self.entries.append((module, activations[0], backprops))
            return fn(module, activations, backprops)
        return sampler

    def settle(self, coef: torch.Tensor) -> None:
        """Add sum_i coef_i * grad_i(p) to ``p.grad`` for every recorded layer's trainable parameters. Each
        layer's record is dropped as soon as it is used, so the gradients being formed do not stack on the
        whole ledger. (Not scaled in place: two layers' output gradients may share storage, e.g. slices of one.)"""
        while self.entries:
            module, a, g = self.entries.pop()
            c = coef.to(device=g.device, dtype=torch.float32).reshape(-1, *([1] * (g.dim() - 1)))
            g = g.float() * c
            for p, grad in weighted_grads(module)(module, a, g).items():
                grad = grad.to(p.dtype)
                p.grad = grad if p.grad is None else p.grad.add_(grad)
            del module, a, g
