"""RMSNorm (Llama, Mistral, Qwen, SmolLM, ...): y = w * n(x) with n(x) = x / sqrt(mean(x^2) + eps).

opacus ships no sampler for it (it would fall back to functorch, which fails on these layers: "autograd.Function
... setup_context"). The per-example gradient of w is the sum over positions of dL/dy * n(x), a (B, d) tensor:
small, so the norm sampler computes it and takes its norm; book-keeping sums it over examples.
"""
from __future__ import annotations

import torch
from torch import nn

from ..layer import LayerType, norms, register_layer, summed


def rms_norm_grad_sample(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    x = activations[0].float()
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + layer.variance_epsilon)
    normed = normed.to(activations[0].dtype).float()
    gs = torch.einsum("b...d,b...d->bd", backprops.float(), normed)
    return {layer.weight: gs.to(layer.weight.dtype)}


def rms_norm_norm_sample(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    return norms(rms_norm_grad_sample(layer, activations, backprops))


def rms_norm_sum(layer: nn.Module, x: torch.Tensor, g: torch.Tensor) -> dict:
    if not layer.weight.requires_grad:
        return {}
    return summed(rms_norm_grad_sample(layer, [x], g))  # (B, d) -> (d,)


def is_rms_norm(module: nn.Module) -> bool:
    """A module named *RMSNorm with one weight vector, a ``variance_epsilon`` and no bias."""
    w = getattr(module, "weight", None)
    return (type(module).__name__.endswith("RMSNorm") and isinstance(w, nn.Parameter) and w.dim() == 1
            and hasattr(module, "variance_epsilon") and getattr(module, "bias", None) is None)


register_layer(LayerType("rms_norm", matches=is_rms_norm, clipped_sum=rms_norm_sum,
                         grad_sampler=rms_norm_grad_sample, norm_sampler=rms_norm_norm_sample))
