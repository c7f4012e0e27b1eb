"""Per-example gradients and gradient norms for layers opacus has no sampler for (full fine-tuning under DP).

RMSNorm (Llama, Mistral, Qwen, SmolLM, ...): y = w * n(x) with n(x) = x / sqrt(mean(x^2) + eps),
so the per-example gradient of w is sum over positions of dL/dy * n(x) (a (B, d) tensor: small, so the
norm sampler for ghost clipping computes it and takes its norm, as opacus' own samplers do for such layers).
Without the grad sampler opacus falls back to functorch, which fails on these layers ("autograd.Function
... setup_context"); without the norm sampler ghost clipping has nothing for them.

transformers' ``Conv1D`` (GPT-2's attention and MLP): y = x @ W + b with W of shape (in, out), a Linear with
its weight transposed; the per-example gradient of W is sum over positions a^T g, of b sum over positions g.
Its norm sampler is the Linear one's ghost norm (||a^T g||_F = ||g^T a||_F, from the (T, T) Gram matrices of a
and g, no per-example gradient).

LayerNorm (GPT-2, GPT-NeoX): opacus ships the grad sampler, not the norm sampler: the per-example gradients
of w and b (sum over positions of g * n(x) and of g, with n the normalisation without affine) are (B, d), so
the norm sampler computes them and takes their norms.

Each is registered once per class, in opacus' registries (``register_grad_sampler`` /
``register_norm_sampler``), for every class found with trainable weights of its own whose forward is the one
these formulas describe (a subclass that overrides ``forward`` gets none).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_REGISTERED: set[type] = set()


def rms_norm_grad_sample(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    x = activations[0].float()
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + layer.variance_epsilon)
    normed = normed.to(activations[0].dtype).float()
    gs = torch.einsum("b...d,b...d->bd", backprops.float(), normed)
    return {layer.weight: gs.to(layer.weight.dtype)}


def _norms(grads: dict) -> dict:
    return {p: gs.reshape(len(gs), -1).norm(2, dim=-1) for p, gs in grads.items()}


def _rms_norm_norm_sampler(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    return _norms(rms_norm_grad_sample(layer, activations, backprops))


def conv1d_grad_sample(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    """Per-example gradients of a ``Conv1D`` (y = x @ W + b, W (in, out)): W -> (B, in, out), b -> (B, out)."""
    a = activations[0].to(backprops.dtype)
    out = {}
    if layer.weight.requires_grad:
        out[layer.weight] = torch.einsum("n...i,n...j->nij", a, backprops)
    if layer.bias is not None and layer.bias.requires_grad:
        out[layer.bias] = torch.einsum("n...k->nk", backprops)
    return out


def _conv1d_norm_sampler(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
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


def _layer_norm_norm_sampler(layer: nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor):
    return _norms(layer_norm_grad_sample(layer, activations, backprops))


def is_rms_norm(module: nn.Module) -> bool:
    w = getattr(module, "weight", None)
    return (type(module).__name__.endswith("RMSNorm") and isinstance(w, nn.Parameter) and w.dim() == 1
            and hasattr(module, "variance_epsilon") and getattr(module, "bias", None) is None)


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


def is_layer_norm(module: nn.Module) -> bool:
    """torch's LayerNorm (or a subclass computing the same)."""
    return isinstance(module, nn.LayerNorm) and type(module).forward is nn.LayerNorm.forward


def _samplers(module: nn.Module):
    """(grad sampler or None where opacus has one, norm sampler) for ``module``'s type, or None."""
    if is_rms_norm(module):
        return rms_norm_grad_sample, _rms_norm_norm_sampler
    if is_conv1d(module):
        return conv1d_grad_sample, _conv1d_norm_sampler
    if is_layer_norm(module):
        return layer_norm_grad_sample, _layer_norm_norm_sampler
    return None


def register_for(model: nn.Module) -> list[str]:
    """Register the grad and norm samplers above for every RMSNorm, Conv1D and LayerNorm class with trainable
    weights in ``model`` (opacus' own samplers, where it has one for that exact class, are left in place)."""
    from opacus.grad_sample import GradSampleModule, register_grad_sampler, register_norm_sampler
    from opacus.grad_sample import GradSampleModuleFastGradientClipping as GSM

    added = []
    for m in model.modules():
        t = type(m)
        if t in _REGISTERED or not any(p.requires_grad for p in m.parameters(recurse=False)):
            continue
        fns = _samplers(m)
        if fns is None:
            continue
        grad_fn, norm_fn = fns
        if t not in GradSampleModule.GRAD_SAMPLERS:
            register_grad_sampler(t)(grad_fn)
        if t not in GSM.NORM_SAMPLERS:
            register_norm_sampler(t)(norm_fn)
        _REGISTERED.add(t)
        added.append(t.__name__)
    return added
