"""Every layer type the DP engine supports, one module each (``..layer.LayerType``), registered on import.

This package imports all of its modules, so adding a layer type is adding one module here; the lookups the
engine uses (which type a module is, registering opacus' samplers for a model's types) are below.
"""
from __future__ import annotations

import importlib
import pkgutil

from torch import nn

from ..layer import LAYERS, LayerType

for _info in pkgutil.iter_modules(__path__):  # sorted by name: the registry's order does not depend on the disk
    importlib.import_module(f"{__name__}.{_info.name}")

#: classes whose samplers ``register_for`` has registered with opacus
_REGISTERED: set[type] = set()


def layer_type(module: nn.Module) -> LayerType | None:
    """The registered type of ``module``, or None when the engine knows none."""
    for name in LAYERS.names():
        layer = LAYERS.get(name)
        if layer.matches(module):
            return layer
    return None


def own_trainable(module: nn.Module) -> bool:
    """Whether ``module`` has trainable weights of its own (not its children's)."""
    return any(p.requires_grad for p in module.parameters(recurse=False))


def register_for(model: nn.Module) -> list[str]:
    """Register, in opacus' registries, the grad and norm samplers of every layer type in ``model`` with trainable
    weights of its own, per class (opacus' own samplers, where it has one for that exact class, are left in place);
    the names of the classes registered now."""
    from opacus.grad_sample import GradSampleModule, register_grad_sampler, register_norm_sampler
    from opacus.grad_sample import GradSampleModuleFastGradientClipping as GSM

    added = []
    for m in model.modules():
        t = type(m)
        if t in _REGISTERED or not own_trainable(m):
            continue
        layer = layer_type(m)
        if layer is None or (layer.grad_sampler is None and layer.norm_sampler is None):
            continue
        if layer.grad_sampler is not None and t not in GradSampleModule.GRAD_SAMPLERS:
            register_grad_sampler(t)(layer.grad_sampler)
        if layer.norm_sampler is not None and t not in GSM.NORM_SAMPLERS:
            register_norm_sampler(t)(layer.norm_sampler)
        _REGISTERED.add(t)
        added.append(t.__name__)
    return added
