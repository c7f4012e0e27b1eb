"""What the DP engine knows of one layer type, declared once per type in ``layers/<type>.py``.

A layer module registers one ``LayerType`` (``register_layer(LayerType(...))``), whose fields say everything the
engine needs of that type:

* ``matches(module)``: whether a module is of this type (its forward computes what the formulas below assume);
* ``grad_sampler(layer, activations, backprops)``: per-example gradients {param: (B, *shape)} for opacus'
  hooks mode, or None where opacus ships one for the class;
* ``norm_sampler(layer, activations, backprops)``: per-example gradient norms {param: (B,)} for ghost clipping,
  or None where opacus ships one;
* ``clipped_sum(layer, a, g)``: book-keeping's closed form: sum over examples (and positions) of the weighted
  per-example gradients, given the activations ``a`` and the coefficient-weighted output gradients ``g``;
* ``weight_from_output``: its weight gradient is a product of (a, g) that ghost's norm pass need not form
  (Linear-like layers: the norm pass skips them, ``ghost.norm_pass_targets``).

``layers/__init__.py`` imports every module of the package, so adding a layer type is one new module there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn

from ...shared.core.registry import Registry

Sampler = Callable[[nn.Module, list, object], dict]


@dataclass(frozen=True)
class LayerType:
    name: str
    matches: Callable[[nn.Module], bool]
    clipped_sum: Callable[[nn.Module, object, object], dict]
    grad_sampler: Sampler | None = None
    norm_sampler: Sampler | None = None
    weight_from_output: bool = False


LAYERS: Registry[LayerType] = Registry("layer type")


def register_layer(layer: LayerType) -> LayerType:
    """Register ``layer`` under its name (a second registration of a name is refused)."""
    return LAYERS.register(layer.name)(layer)


def norms(grads: dict) -> dict:
    """Per-example norms {param: (B,)} of per-example gradients {param: (B, ...)}: the norm sampler of a layer whose
    per-example gradients are small (B x its width), as opacus' own samplers do for such layers."""
    return {p: gs.reshape(len(gs), -1).norm(2, dim=-1) for p, gs in grads.items()}


def summed(grads: dict) -> dict:
    """Book-keeping's sum over examples of per-example gradients {param: (B, ...)} (already weighted), in fp32."""
    return {p: gs.float().sum(0) for p, gs in grads.items()}
