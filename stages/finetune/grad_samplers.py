"""Per-example gradients and gradient norms for layers opacus has no sampler for (full fine-tuning under DP).

RMSNorm (Llama, Mistral, Qwen, SmolLM, ...): y = w * n(x) with n(x) = x / sqrt(mean(x^2) + eps),
so the per-example gradient of w is sum over positions of dL/dy * n(x) (a (B, d) tensor: small, so the
norm sampler for ghost clipping computes it and takes its norm, as opacus' own samplers do for such layers).
Without the grad sampler opacus falls back to functorch, which fails on these layers ("autograd.Function
... setup_context"); without the norm sampler ghost clipping has nothing for them.

Both are registered once per class, in opacus' registries (``register_grad_sampler`` /
``register_norm_sampler``), for every RMSNorm class found with trainable weights.
"""
from __future__ import annotations

import torch
from torch import nn

_REGISTERED: set[type] = set()


def rms_norm_grad_sample(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    x = activations[0].float()
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + layer.variance_epsilon)
    normed = normed.to(activations[0].dtype).float()
    gs = torch.einsum("b...d,b...d->bd", backprops.float(), normed)
    return {layer.weight: gs.to(layer.weight.dtype)}


def _rms_norm_norm_sampler(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    grads = rms_norm_grad_sample(layer, activations, backprops)
    return {p: gs.reshape(len(gs), -1).norm(2, dim=-1) for p, gs in grads.items()}


def is_rms_norm(module: nn.Module) -> bool:
    w = getattr(module, "weight", None)
    return (type(module).__name__.endswith("RMSNorm") and isinstance(w, nn.Parameter) and w.dim() == 1
            and hasattr(module, "variance_epsilon") and getattr(module, "bias", None) is None)


def register_for(model: nn.Module) -> list[str]:
    """Register the RMSNorm grad and norm samplers for every RMSNorm class with trainable weights in ``model``."""
    from opacus.grad_sample import register_grad_sampler, register_norm_sampler

    added = []
    for m in model.modules():
        t = type(m)
        if t not in _REGISTERED and is_rms_norm(m) and m.weight.requires_grad:
            register_grad_sampler(t)(rms_norm_grad_sample)
            register_norm_sampler(t)(_rms_norm_norm_sampler)
            _REGISTERED.add(t)
            added.append(t.__name__)
    return added
