"""Clipping strategies: how a DP step gets the clipped sum of per-example gradients (``finetune.dp.grad_sample_mode``).

A registry in the style of opacus' grad-sampler registry: ``@register_strategy(name)`` registers a strategy
under its name (duplicates refused), ``get_strategy`` looks a mode up (a miss lists the known names). Each
strategy states what it needs of every module with trainable weights of its own (``requires``); ``refusal``
names the first module that lacks it, and the error says which mode to use instead. ``resolve`` turns
``auto`` into the most preferred strategy the model supports, with the reason where it is not the first choice.

* ``hooks``: opacus' GradSampleModule materialises every per-example gradient of a chunk (the reference);
* ``ghost``: opacus' ghost clipping (``ghost.py``): per-example norms from a first backward pass, then the loss
  weighted by the clipping factors is backpropagated;
* ``bk``: book-keeping (``bookkeeping.py``): ghost's norm pass, then the clipped sum formed from the activations
  and output gradients that pass already had (one backward pass; measured fastest, so auto's first choice);
* ``ghost_fsdp``: opacus' ghost clipping over an FSDP2-sharded model (``finetune.distributed.strategy: fsdp``,
  ``../sharding.py``): a run asking for ghost or auto gets it when sharded; never auto's choice otherwise.

User-level DP (``finetune.dp.unit: user``): a strategy with ``per_user`` sums each chunk's per-example gradients by
user before the optimizer clips them (``group``), so the clipped unit is a user's whole contribution, exactly. Only
hooks has per-example gradients to sum; ghost's and book-keeping's per-example norms do not give the norm of a
user's sum (its cross terms are missing), so they are refused, and ``auto`` resolves to hooks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ...shared.core.errors import ConfigError
from ...shared.core.registry import Registry
from . import bookkeeping, ghost
from .layers import register_for

STRATEGIES: Registry["ClippingStrategy"] = Registry("grad-sample mode")
KEY = "finetune.dp.grad_sample_mode"
UNIT_KEY = "finetune.dp.unit"


@dataclass(frozen=True)
class Requirement:
    """What a strategy needs of every module with trainable weights of its own."""

    what: str  # e.g. "norm sampler"
    owner: str  # the technique that needs it, as a refusal names it
    fallback: str  # the mode to use where it is missing
    missing: Callable[[torch.nn.Module], list[str]]  # "name (Type)" of the modules that lack it


NORM_SAMPLER = Requirement("norm sampler", "ghost clipping", "hooks", ghost.unsupported)
CLIPPED_SUM = Requirement("clipped-sum form", "book-keeping", "ghost", bookkeeping.unsupported)


def register_strategy(name: str, *, auto_rank: int):
    """Register a ``ClippingStrategy`` subclass (one instance) under ``name``; ``auto`` prefers low ranks."""
    def deco(cls):
        STRATEGIES.register(name)(cls(name, auto_rank))
        return cls
    return deco


def get_strategy(name: str) -> "ClippingStrategy":
    return STRATEGIES.get(name, KEY)


class ClippingStrategy:
    """A way to clip: which opacus module and optimizer it uses, and one chunk's backward pass."""

    requires: tuple[Requirement, ...] = ()
    #: clips through ghost clipping's norm pass (the model keeps its input embeddings per chunk)
    norm_pass = False
    #: clips a model sharded by FSDP (``finetune.distributed.strategy: fsdp``)
    sharded = False
    #: can clip a user's summed gradient as one unit (``group``; user-level DP)
    per_user = False

    def __init__(self, name: str, auto_rank: int) -> None:
        self.name, self.auto_rank = name, auto_rank

    def __repr__(self) -> str:
        return f"<clipping strategy {self.name}>"

    def refusal(self, model: torch.nn.Module) -> tuple[Requirement, str] | None:
        """(the unmet requirement, the first module lacking it), or None where every module is supported."""
        for req in self.requires:
            missing = req.missing(model)
            if missing:
                return req, missing[0]
        return None

    def check(self, model: torch.nn.Module) -> None:
        """Refuse ``model`` (ConfigError) where a module lacks what this strategy needs."""
        refused = self.refusal(model)
        if refused:
            req, module = refused
            raise ConfigError(f"{KEY}: {req.owner} has no {req.what} for {module}; use '{req.fallback}'")

    def wrap(self, inner: torch.nn.Module, dp) -> torch.nn.Module:
        raise NotImplementedError

    def optimizer_class(self, distributed: bool):
        raise NotImplementedError

    def ledger(self, net):
        """Per-chunk records the backward pass needs (book-keeping's), or None."""
        return None

    def targets(self, model) -> list[torch.Tensor] | None:
        """What the norm pass differentiates towards (``ghost.norm_pass_targets``), or None."""
        return ghost.norm_pass_targets(model) if self.norm_pass else None

    def empty_grads(self, params) -> None:
        """Gradients of an empty Poisson batch (the step still adds noise)."""
        raise NotImplementedError

    def backward(self, private, losses: torch.Tensor) -> None:
        """One chunk's backward pass, leaving what the optimizer clips (or has clipped) in place."""
        raise NotImplementedError

    def group(self, private, units: torch.Tensor) -> None:
        """User-level DP: make the chunk's clipped units its users (``units``: each row's user within the chunk)."""
        raise ConfigError(f"{UNIT_KEY}: user-level clipping is not supported by grad_sample_mode {self.name}")


@register_strategy("hooks", auto_rank=2)
class Hooks(ClippingStrategy):
    def wrap(self, inner, dp):
        from opacus import GradSampleModule

        return GradSampleModule(inner, batch_first=True, loss_reduction="mean")

    def optimizer_class(self, distributed: bool):
        from opacus.optimizers import DistributedDPOptimizer, DPOptimizer

        return DistributedDPOptimizer if distributed else DPOptimizer

    def empty_grads(self, params) -> None:
        for p in params:
            p.grad_sample = torch.zeros((0, *p.shape), device=p.device, dtype=p.dtype)

    per_user = True

    def backward(self, private, losses: torch.Tensor) -> None:
        losses.mean().backward()  # opacus 'mean' rescales by the chunk size -> per-example grads

    def group(self, private, units: torch.Tensor) -> None:
        group_by_unit(private.optimizer.params, units)


def group_by_unit(params, units: torch.Tensor) -> None:
    """Each parameter's per-example gradients (``p.grad_sample``, (B, ...)) summed by unit: (U, ...), row u the sum
    over the rows whose ``units`` entry is u (0 .. U-1). The optimizer then clips each unit's summed gradient to C,
    as it clipped each example's: the per-user computation itself, not a bound on it."""
    count = int(units.max()) + 1 if len(units) else 0
    for p in params:
        gs = getattr(p, "grad_sample", None)
        if gs is None:
            continue
        gs = torch.cat(gs, 0) if isinstance(gs, list) else gs
        if len(gs) != len(units):
            raise RuntimeError(f"user-level clipping: {len(gs)} per-example gradients for {len(units)} rows")
        idx = units.to(gs.device)
        p.grad_sample = gs.new_zeros((count, *gs.shape[1:])).index_add_(0, idx, gs)


@register_strategy("ghost", auto_rank=1)
class Ghost(ClippingStrategy):
    requires = (NORM_SAMPLER,)
    norm_pass = True

    def wrap(self, inner, dp):
        from opacus.grad_sample import GradSampleModuleFastGradientClipping

        # "sum": the norm pass backpropagates the summed loss, so output gradients are already per example
        # (no rescaling by the chunk size); the optimizer still divides the clipped sum by the expected batch
        return GradSampleModuleFastGradientClipping(inner, batch_first=True, loss_reduction="sum",
                                                    max_grad_norm=dp.max_grad_norm, use_ghost_clipping=True)

    def optimizer_class(self, distributed: bool):
        from opacus.optimizers import DistributedDPOptimizerFastGradientClipping, DPOptimizerFastGradientClipping

        return DistributedDPOptimizerFastGradientClipping if distributed else DPOptimizerFastGradientClipping

    def empty_grads(self, params) -> None:
        for p in params:
            p.grad = torch.zeros_like(p)

    def backward(self, private, losses: torch.Tensor) -> None:
        ghost.ghost_backward(private.net, losses, private.targets, private.ledger)


@register_strategy("bk", auto_rank=0)
class Bookkeeping(Ghost):
    requires = (NORM_SAMPLER, CLIPPED_SUM)

    def ledger(self, net):
        return bookkeeping.Ledger(net)


@register_strategy("ghost_fsdp", auto_rank=9)
class GhostFSDP(ClippingStrategy):
    """opacus' ghost clipping for FSDP2 (``GradSampleModuleFastGradientClippingFSDP``): each module's per-example
    gradient norm from its (whole) activations and output gradients in a first backward pass, then the loss
    weighted by the clipping factors backpropagated with hooks off. opacus' form: the first pass is a full backward
    (its weight gradients are discarded), as autograd cannot stop early at FSDP's per-module reductions."""

    sharded = True

    def wrap(self, inner, dp):
        from opacus.grad_sample import GradSampleModuleFastGradientClippingFSDP

        return GradSampleModuleFastGradientClippingFSDP(inner, batch_first=True, loss_reduction="sum",
                                                        max_grad_norm=dp.max_grad_norm, use_ghost_clipping=True)

    def optimizer_class(self, distributed: bool):
        from opacus.optimizers import FSDPOptimizerFastGradientClipping

        return FSDPOptimizerFastGradientClipping

    def empty_grads(self, params) -> None:
        for p in params:
            p.grad = torch.zeros_like(p)

    def backward(self, private, losses: torch.Tensor) -> None:
        net = private.net
        losses.sum().backward(retain_graph=True)  # the norm pass: hooks record each module's per-example norms
        for p in net.trainable_parameters:
            p.grad = None
        coef = net.get_clipping_coef().to(losses.device)
        net.disable_hooks()
        try:
            (coef * losses).sum().backward()
        finally:
            net.enable_hooks()


def reason(req: Requirement, module: str) -> str:
    """Why ``auto`` passed over the strategies that need ``req`` (the simplest named first)."""
    names = [STRATEGIES.get(n) for n in STRATEGIES.names()]
    needing = [s.name for s in sorted(names, key=lambda s: (len(s.requires), s.name)) if req in s.requires]
    return f"{' and '.join(needing)} {'have' if len(needing) > 1 else 'has'} no {req.what} for {module}"


def resolve(model: torch.nn.Module, mode: str, sharded: bool = False,
            per_user: bool = False) -> tuple[ClippingStrategy, str | None]:
    """(strategy, why): an explicit mode is looked up as is; ``auto`` is the lowest-ranked strategy whose
    requirements every trainable module meets (bk, else ghost, else hooks), ``why`` naming what ruled out the
    first choice (None where it was taken). A ``sharded`` model (FSDP) is clipped by ghost_fsdp, asked for as
    ghost or auto; other modes are refused, as is ghost_fsdp without sharding. ``per_user`` (user-level DP): the
    strategies that can clip a user's summed gradient only (hooks; ``auto`` resolves to it)."""
    if per_user:
        if sharded:
            raise ConfigError(f"{UNIT_KEY}: user-level DP runs in one process, not sharded")
        if mode == "auto":
            return get_strategy("hooks"), "user-level clipping sums per-example gradients by user (hooks)"
        strategy = get_strategy(mode)
        if not strategy.per_user:
            raise ConfigError(f"{UNIT_KEY}: user-level clipping sums a user's per-example gradients before clipping; "
                              f"{KEY} {mode} has none: use hooks or auto")
        return strategy, None
    if sharded:
        if mode not in ("ghost", "auto", "ghost_fsdp"):
            raise ConfigError(f"{KEY}: a sharded run (finetune.distributed.strategy: fsdp) clips through opacus' "
                              f"ghost_fsdp: use ghost or auto (got {mode!r})")
        return get_strategy("ghost_fsdp"), ("sharded by fsdp" if mode == "auto" else None)
    if mode == "ghost_fsdp":
        raise ConfigError(f"{KEY}: ghost_fsdp clips a sharded model: needs finetune.distributed.strategy: fsdp")
    if mode != "auto":
        return get_strategy(mode), None
    # the layer types' samplers (RMSNorm's, Conv1D's, LayerNorm's), before asking which modules have one
    register_for(model)
    why = None
    for strategy in sorted((s for s in (STRATEGIES.get(n) for n in STRATEGIES.names()) if not s.sharded),
                           key=lambda s: s.auto_rank):
        refused = strategy.refusal(model)
        if refused is None:
            return strategy, why
        why = why or reason(*refused)
    raise ConfigError(f"{KEY}: no clipping strategy supports this model")  # unreachable: hooks needs nothing

