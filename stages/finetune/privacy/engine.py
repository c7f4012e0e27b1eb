"""Differential privacy for the fine-tuning loop, all through opacus: sigma calibrated by the accountant
(``stages/shared/core/privacy.py``, shared with the audit's planned ceiling), the model wrapped by the clipping strategy
the grad-sample mode names (``strategies.py``), the optimizer for clipping and noise, and the accountant stepped
once per logical step at the Poisson rate q; ``dp_step`` runs one logical step over its physical chunks.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ...shared.core.privacy import calibrate_sigma, create_accountant
from ...shared.core.seeds import stream
from ...shared.lm.batching import collate
from ...shared.lm.scoring import autocast
from ..loss import per_sample_losses
from ..sampling import secure_seed
from ..schema import PrivacyRecord
from .layers import register_for
from .strategies import ClippingStrategy, get_strategy, resolve


def privacy_profile(accountant, deltas=tuple(10.0 ** -k for k in range(1, 11))) -> list[dict]:
    """epsilon(delta) of the run's (sigma, q, T), as the accountant computes it (upper bounds).

    PRV: the composed privacy-loss distribution is discretised once, at the error the smallest delta
    needs, and queried for every delta (opacus' get_epsilon would rebuild it per delta)."""
    get_dprv = getattr(accountant, "_get_dprv", None)
    if get_dprv is None:
        return [{"delta": float(d), "epsilon": float(accountant.get_epsilon(delta=float(d)))} for d in deltas]
    dprv = get_dprv(eps_error=0.01, delta_error=min(deltas) / 1000)
    return [{"delta": float(d), "epsilon": float(dprv.compute_epsilon(d, min(deltas) / 1000, 0.01)[2])} for d in deltas]


@dataclass
class Private:
    """A model and optimizer made private: ``net`` computes per-example gradients (hooks) or their norms
    (ghost, bk), ``optimizer`` clips and noises them (noise from ``noise``, a seeded generator), ``accountant``
    tracks the spend; ``strategy`` (``strategies.py``) does each chunk's backward pass."""

    net: torch.nn.Module
    optimizer: object
    accountant: object
    noise: torch.Generator
    privacy: dict
    strategy: ClippingStrategy
    ledger: object = None  # bookkeeping.Ledger in bk mode
    targets: list | None = None  # what the norm pass differentiates towards (ghost, bk)

    @property
    def mode(self) -> str:
        """ghost | bk | hooks"""
        return self.strategy.name


def wrap_model(model, dp, distributed: bool, device=None):
    """The module of the strategy ``dp.grad_sample_mode`` names (opacus' GradSampleModule for hooks, its
    fast-gradient-clipping module for ghost and bk, its FSDP one for ghost_fsdp) around ``model`` (first wrapped in
    opacus' DPDDP, which broadcasts rank 0's weights, when data-parallel; sharded in place by FSDP2 for
    ghost_fsdp, ``../sharding.py``); a model the strategy cannot clip is refused."""
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
    from opacus.validators import ModuleValidator

    register_for(model)  # exact per-example grads and norms for RMSNorm, Conv1D, LayerNorm (full fine-tuning)
    errors = ModuleValidator.validate(model, strict=False)
    if errors:
        raise ValueError(f"model is not DP-compatible: {errors[0]}")
    strategy = get_strategy(dp.grad_sample_mode)
    strategy.check(model)
    if strategy.sharded:
        from ..sharding import shard

        for p in model.parameters():  # every rank starts from rank 0's weights (FSDP shards, it does not sync)
            torch.distributed.broadcast(p.data, 0)
        return strategy.wrap(shard(model, device), dp)
    inner = DPDDP(model) if distributed else model
    return strategy.wrap(inner, dp)


def public_divisor(sample_rate: float, population: int, world_size: int = 1) -> float:
    """What a DP step divides the noisy clipped sum by: the expected batch q * population of the fixed candidate
    pool (every example that could have been drawn in, members or not), per rank. A public constant: it never
    depends on the data (q * n of the pool actually drawn from would reveal n, which the accountant does not
    cover; DP-SGD's step size would scale with it)."""
    return max(1, int(round(sample_rate * population))) / world_size


def make_private(model, optimizer, dp, *, sample_rate: float, steps: int, population: int, seed: int,
                 optimizer_name: str, device, world_size: int = 1, sharded: bool = False) -> Private:
    """Wrap ``model``/``optimizer`` for DP-SGD (or DP-Adam) at (dp.epsilon, delta) with delta = dp.delta or
    population^-1.1; the noisy clipped sum is divided by ``public_divisor`` (q * population, never q * n).

    ``world_size`` > 1: data-parallel over torch.distributed (opacus' distributed optimizers): each rank
    clips its share of the Poisson batch, rank 0 alone adds the noise, the sum is all-reduced; the rate q,
    sigma and the accountant are those of the single-process run. ``sharded``: FSDP2 (``../sharding.py``):
    ``model`` is sharded in place, ``optimizer`` then holds its shards; every rank adds its shard's part of the
    same noise draw."""
    delta = dp.delta if dp.delta is not None else population ** -1.1
    sigma = calibrate_sigma(dp.epsilon, delta, sample_rate, steps, dp.accountant)
    requested = dp.grad_sample_mode
    strategy, why = resolve(model, requested, sharded, per_user=dp.unit == "user")
    dp = dataclasses.replace(dp, grad_sample_mode=strategy.name)
    net = wrap_model(model, dp, world_size > 1, device)
    if strategy.sharded:  # fully_shard replaced the parameters (same order): the optimizer steps their shards
        optimizer.param_groups[0]["params"] = [p for p in model.parameters() if p.requires_grad]
    # secure_rng: OS entropy, never written anywhere (rank 0's, broadcast: a sharded run's ranks draw the same noise
    # and each keeps its shard's part); else seeded (reproducible, the guarantee then assumes the seed is secret).
    # opacus' secure_mode also draws each noise value as a sum of Gaussians (floating-point attacks)
    noise = torch.Generator(device=device).manual_seed(secure_seed(world_size) % 2 ** 63 if dp.secure_rng
                                                     else stream("finetune.noise").int_seed(seed))
    cls = strategy.optimizer_class(world_size > 1)
    # the clipped sum is divided by the public expected batch: per rank, as opacus' distributed optimizers then
    # average the ranks' (sum / expected share) over the world
    per_process_divisor = public_divisor(sample_rate, population, world_size)
    opt = cls(optimizer, noise_multiplier=sigma, max_grad_norm=dp.max_grad_norm,
              expected_batch_size=per_process_divisor, loss_reduction="mean", generator=noise,
              secure_mode=dp.secure_rng)
    accountant = create_accountant(dp.accountant)
    opt.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=sample_rate))
    privacy = {"dp": True, "target_epsilon": dp.epsilon, "delta": delta, "noise_multiplier": sigma,
               "max_grad_norm": dp.max_grad_norm, "accountant": dp.accountant, "sample_rate": sample_rate,
               "steps": steps, "public_divisor": per_process_divisor * world_size, "optimizer": f"DP-{optimizer_name}",
               "grad_sample_mode": dp.grad_sample_mode, "world_size": world_size,
               "sharding": ("fsdp" if strategy.sharded else "ddp") if world_size > 1 else None,
               "secure_rng": dp.secure_rng, "unit": dp.unit,
               "rows_per_user": dp.rows_per_user if dp.unit == "user" else None}
    if requested == "auto":  # what auto chose, and why where it is not bk
        privacy["grad_sample_mode_requested"] = requested
        if why:
            privacy["grad_sample_mode_reason"] = why
    return Private(net, opt, accountant, noise, privacy, strategy, strategy.ledger(net), strategy.targets(model))


def spent(private: Private) -> PrivacyRecord:
    """The run's privacy record: the mechanism's parameters with the accountant's epsilon at delta and its
    profile."""
    acc = private.accountant
    return PrivacyRecord(**private.privacy, epsilon_spent=float(acc.get_epsilon(delta=private.privacy["delta"])),
                         accounted_steps=int(sum(h[-1] for h in acc.history)),
                         # (sigma, q, steps) as the accountant booked them (public: the run's own parameters)
                         accountant_history=[[float(h[0]), float(h[1]), int(h[2])] for h in acc.history],
                         profile=privacy_profile(acc))


def dp_step(private: Private, params, examples, parts, pad_id: int, device, pad_to: int | None = None,
            units: list | None = None) -> list[torch.Tensor]:
    """One logical DP step over its physical chunks: per-example clipping by the run's clipping strategy, noise
    once at the last chunk. ``pad_to``: run that many chunks (a sharded run's ranks all run the most any has, as
    FSDP's gathers are collectives), the extra ones on one example weighted zero. ``units`` (user-level DP): per
    chunk, each row's user within the chunk; a user's rows are then clipped together, as one unit."""
    net, opt, strategy = private.net, private.optimizer, private.strategy
    losses = []
    count = len(parts) if pad_to is None else pad_to
    if not count:  # empty Poisson batch: the step still adds noise
        strategy.empty_grads(params)
        opt.step()
        opt.zero_grad()
    for j in range(count):
        padding = j >= len(parts)
        batch = collate([examples[i] for i in (parts[j] if not padding else [0])], pad_id, device)
        with autocast(device):
            ls = per_sample_losses(net, batch)
        if padding:  # contributes nothing: zero loss, zero output gradients, zero norm, zero clipped gradient
            ls = ls * 0.0
        strategy.backward(private, ls)
        if units is not None:
            strategy.group(private, torch.as_tensor(units[j], dtype=torch.long))
        opt.signal_skip_step(do_skip=j < count - 1)
        opt.step()
        opt.zero_grad()
        if not padding:
            losses.append(ls.detach())
    return losses
