"""Book-keeping clipping (Bu et al., 2023): ghost clipping's per-example norms and the clipped sum from ONE
backward pass.

opacus' ghost clipping (``ghost``) runs two backward passes: a norm pass, whose hooks give each layer's
activations a and output gradients g to opacus' norm samplers, then a second full backward pass of
sum_i c_i * loss_i to get the clipped sum. The second pass recomputes every output gradient only to form,
per layer, sum_i c_i * grad_i(W), which is a closed form in the (a, g) the norm pass already had: each layer
type's ``LayerType.clipped_sum`` (``layers/``: Linear sum_i c_i g_i^T a_i, Conv1D its transpose, Embedding an
index-add at the ids, RMSNorm and LayerNorm sum_i c_i g_i * n(a_i), biases sum_i c_i g_i; each sum also over
positions).
``bk`` keeps (a, g) from the norm pass (opacus still computes the norms, with its own samplers, so the
clipping coefficients are opacus') and forms those sums directly: no second pass, no per-example gradient.
It costs the memory of every trainable layer's output gradients for one chunk, which ghost frees as it
goes. opacus does not ship it (as of 1.6), hence this module; ``tests/finetune/test_ghost.py`` checks it
against opacus' hooks mode for every paradigm.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .layers import layer_type, own_trainable


def weighted_grads(module: nn.Module) -> Callable | None:
    """The closed-form clipped-sum function for ``module``'s type (``LayerType.clipped_sum``), or None."""
    layer = layer_type(module)
    return layer.clipped_sum if layer is not None else None


def unsupported(model: nn.Module) -> list[str]:
    """Modules with trainable weights of their own that book-keeping has no closed form for."""
    return [f"{name or 'model'} ({type(m).__name__})" for name, m in model.named_modules()
            if own_trainable(m) and weighted_grads(m) is None]


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
