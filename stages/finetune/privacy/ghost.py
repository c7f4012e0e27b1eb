"""Ghost clipping's mechanics (the ``ghost`` and ``bk`` clipping strategies, ``strategies.py``): opacus computes
per-example gradient norms from each layer's activations and output gradients in a first backward pass, then
the loss weighted by the clipping factors is backpropagated (ghost) or the clipped sum is formed from that pass's
records (book-keeping, ``bookkeeping.py``). No per-example gradient is ever in memory.

The norm pass stops at the decoder's input embeddings: it needs output gradients, not weight gradients, so it
computes none of the Linear layers' weight gradients, which the second pass computes once.
"""
from __future__ import annotations

import torch

from ..loss import unwrap
from .layers import layer_type


def unsupported(model: torch.nn.Module) -> list[str]:
    """Modules with trainable weights of their own that opacus has no norm sampler for ("name (Type)")."""
    from opacus.grad_sample import GradSampleModuleFastGradientClipping as GSM

    return [f"{name or 'model'} ({type(m).__name__})" for name, m in model.named_modules()
            if any(p.requires_grad for p in m.parameters(recurse=False)) and type(m) not in GSM.NORM_SAMPLERS]


def norm_pass_targets(model) -> list[torch.Tensor]:
    """What the ghost norm pass differentiates towards: every trainable parameter that is not a Linear-like
    layer's (``LayerType.weight_from_output``: Linear, Conv1D), i.e. embeddings, norms, soft prompt, prefix. With
    the decoder's input embeddings added per chunk, autograd then reaches every layer's output gradient but skips
    the Linear weight gradients."""
    linear = {id(p) for m in model.modules() if (t := layer_type(m)) is not None and t.weight_from_output
              for p in m.parameters(recurse=False)}
    return [p for p in model.parameters() if p.requires_grad and id(p) not in linear]


def ghost_backward(net, losses: torch.Tensor, targets: list[torch.Tensor], ledger=None) -> None:
    """opacus' ghost clipping for one chunk: per-example gradient norms by a first backward pass through the
    norm samplers, then the backward pass of sum_i c_i * loss_i with c_i = min(1, C / norm_i) (hooks off),
    which leaves the clipped sum in ``.grad``. As opacus' DPTensorFastGradientClipping.backward, except the
    first pass asks autograd only for what the norm samplers need (``norm_pass_targets``).

    With a ``ledger`` (book-keeping, ``bookkeeping.py``) the norm pass also records each layer's activations
    and output gradients, and the clipped sum is formed from them: no second pass."""
    params = net.trainable_parameters
    for p in params:
        p.__dict__.pop("_norm_sample", None)
    inner = unwrap(net)
    first = [inner.last_input] + targets if inner.last_input is not None else targets
    if ledger is not None:
        ledger.recording = True
    try:
        torch.autograd.grad(losses.sum(), first, retain_graph=ledger is None, allow_unused=True)
    finally:
        if ledger is not None:
            ledger.recording = False
    inner.last_input = None
    missing = [n for n, p in net.named_parameters() if p.requires_grad and not hasattr(p, "_norm_sample")]
    if missing:
        raise RuntimeError(f"ghost clipping: no per-example norm for {missing[0]} (its layer saw no gradient)")
    coef = net.get_clipping_coef().to(losses.device)
    if ledger is not None:
        return ledger.settle(coef)
    net.disable_hooks()
    try:
        (coef * losses).sum().backward()
    finally:
        net.enable_hooks()
