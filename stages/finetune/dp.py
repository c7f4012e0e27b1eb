"""Differential privacy for the fine-tuning loop, all through opacus: sigma calibrated by the accountant,
the model wrapped for per-example gradients, the optimizer for clipping and noise, and the accountant
stepped once per logical step at the Poisson rate q.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from ..core.errors import ConfigError

#: the modes that clip through opacus' ghost norm pass and its fast-gradient-clipping optimizers
NORM_PASS_MODES = ("ghost", "bk")


@functools.lru_cache(maxsize=64)
def calibrate_sigma(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """Noise multiplier that spends exactly (epsilon, delta) over ``steps`` steps at rate q."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(
        target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps,
        accountant=accountant, epsilon_tolerance=0.005,
    ))


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
    (ghost), ``optimizer`` clips and noises them (noise from ``noise``, a seeded generator), ``accountant``
    tracks the spend."""

    net: torch.nn.Module
    optimizer: object
    accountant: object
    noise: torch.Generator
    privacy: dict
    mode: str  # ghost | bk | hooks
    ledger: object = None  # bookkeeping.Ledger in bk mode


def secure_seed() -> int:
    """128 bits of OS entropy (``finetune.dp.secure_rng``): a seed nobody can reproduce, for real deployments."""
    import secrets

    return secrets.randbits(128)


def unsupported_for_ghost(model: torch.nn.Module) -> list[str]:
    """Modules with trainable weights of their own that opacus has no norm sampler for ("name (Type)")."""
    from opacus.grad_sample import GradSampleModuleFastGradientClipping as GSM

    return [f"{name or 'model'} ({type(m).__name__})" for name, m in model.named_modules()
            if any(p.requires_grad for p in m.parameters(recurse=False)) and type(m) not in GSM.NORM_SAMPLERS]


def choose_mode(model: torch.nn.Module, mode: str) -> tuple[str, str | None]:
    """(mode, why): ``auto`` is book-keeping (``bk``: one backward pass, no per-example gradient;
    benchmarks/dp_overhead.py measured it fastest for LoRA and full fine-tuning) where every trainable module has
    opacus' norm sampler and a closed-form clipped sum; ghost where only the norm samplers exist; hooks otherwise.
    ``why`` says which module ruled out bk when auto falls back (None otherwise); an explicit mode is kept."""
    if mode != "auto":
        return mode, None
    from .bookkeeping import unsupported
    from .grad_samplers import register_for

    register_for(model)  # RMSNorm's, Conv1D's and LayerNorm's samplers, before asking which modules have one
    missing = unsupported_for_ghost(model)
    if missing:
        return "hooks", f"ghost and bk have no norm sampler for {missing[0]}"
    missing = unsupported(model)
    if missing:
        return "ghost", f"bk has no clipped-sum form for {missing[0]}"
    return "bk", None


def resolve_mode(model: torch.nn.Module, mode: str) -> str:
    """The grad-sample mode ``mode`` (``auto`` or explicit) stands for on ``model`` (``choose_mode``)."""
    return choose_mode(model, mode)[0]


def wrap_model(model, dp, distributed: bool):
    """opacus' GradSampleModule (hooks) or its fast-gradient-clipping module (ghost) around ``model``
    (first wrapped in opacus' DPDDP, which broadcasts rank 0's weights, when data-parallel)."""
    from opacus import GradSampleModule
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
    from opacus.grad_sample import GradSampleModuleFastGradientClipping
    from opacus.validators import ModuleValidator

    from .bookkeeping import unsupported as unsupported_bk
    from .grad_samplers import register_for

    register_for(model)  # exact per-example grads and norms for RMSNorm, Conv1D, LayerNorm (full fine-tuning)
    errors = ModuleValidator.validate(model, strict=False)
    if errors:
        raise ValueError(f"model is not DP-compatible: {errors[0]}")
    inner = DPDDP(model) if distributed else model
    if dp.grad_sample_mode in NORM_PASS_MODES:
        missing = unsupported_for_ghost(model)
        if missing:
            raise ConfigError(f"finetune.dp.grad_sample_mode: ghost clipping has no norm sampler for {missing[0]}; "
                              "use 'hooks'")
        missing = unsupported_bk(model) if dp.grad_sample_mode == "bk" else []
        if missing:
            raise ConfigError(f"finetune.dp.grad_sample_mode: book-keeping has no clipped-sum form for {missing[0]}; "
                              "use 'ghost'")
        # "sum": the norm pass backpropagates the summed loss, so output gradients are already per example
        # (no rescaling by the chunk size); the optimizer still divides the clipped sum by the expected batch
        return GradSampleModuleFastGradientClipping(inner, batch_first=True, loss_reduction="sum",
                                                    max_grad_norm=dp.max_grad_norm, use_ghost_clipping=True)
    return GradSampleModule(inner, batch_first=True, loss_reduction="mean")


def public_divisor(sample_rate: float, population: int, world_size: int = 1) -> float:
    """What a DP step divides the noisy clipped sum by: the expected batch q * population of the fixed candidate
    pool (every example that could have been drawn in, members or not), per rank. A public constant: it never
    depends on the data (q * n of the pool actually drawn from would reveal n, which the accountant does not
    cover; DP-SGD's step size would scale with it)."""
    return max(1, int(round(sample_rate * population))) / world_size


def make_private(model, optimizer, dp, *, sample_rate: float, steps: int, population: int, seed: int,
                 optimizer_name: str, device, world_size: int = 1) -> Private:
    """Wrap ``model``/``optimizer`` for DP-SGD (or DP-Adam) at (dp.epsilon, delta) with delta = dp.delta or
    population^-1.1; the noisy clipped sum is divided by ``public_divisor`` (q * population, never q * n).

    ``world_size`` > 1: data-parallel over torch.distributed (opacus' distributed optimizers): each rank
    clips its share of the Poisson batch, rank 0 alone adds the noise, the sum is all-reduced; the rate q,
    sigma and the accountant are those of the single-process run."""
    from opacus.accountants import create_accountant
    from opacus.optimizers import (
        DistributedDPOptimizer,
        DistributedDPOptimizerFastGradientClipping,
        DPOptimizer,
        DPOptimizerFastGradientClipping,
    )

    from .bookkeeping import Ledger

    delta = dp.delta if dp.delta is not None else population ** -1.1
    sigma = calibrate_sigma(dp.epsilon, delta, sample_rate, steps, dp.accountant)
    requested = dp.grad_sample_mode
    mode, why = choose_mode(model, requested)
    dp = dataclasses.replace(dp, grad_sample_mode=mode)
    net = wrap_model(model, dp, world_size > 1)
    # secure_rng: OS entropy, never written anywhere; else seeded (reproducible, the guarantee then assumes the
    # seed is secret). opacus' secure_mode also draws each noise value as a sum of Gaussians (floating-point attacks)
    noise = torch.Generator(device=device).manual_seed(secure_seed() % 2 ** 63 if dp.secure_rng else seed + 1)
    ghost = dp.grad_sample_mode in NORM_PASS_MODES
    cls = {(False, False): DPOptimizer, (True, False): DPOptimizerFastGradientClipping,
           (False, True): DistributedDPOptimizer,
           (True, True): DistributedDPOptimizerFastGradientClipping}[(ghost, world_size > 1)]
    # the clipped sum is divided by the public expected batch: per rank, as opacus' distributed optimizers then
    # average the ranks' (sum / expected share) over the world
    divisor = public_divisor(sample_rate, population, world_size)
    opt = cls(optimizer, noise_multiplier=sigma, max_grad_norm=dp.max_grad_norm,
              expected_batch_size=divisor, loss_reduction="mean", generator=noise, secure_mode=dp.secure_rng)
    accountant = create_accountant(mechanism=dp.accountant)
    opt.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=sample_rate))
    privacy = {"dp": True, "target_epsilon": dp.epsilon, "delta": delta, "noise_multiplier": sigma,
               "max_grad_norm": dp.max_grad_norm, "accountant": dp.accountant, "sample_rate": sample_rate,
               "steps": steps, "expected_batch_size": sample_rate * population,
               "divisor": divisor * world_size, "optimizer": f"DP-{optimizer_name}",
               "grad_sample_mode": dp.grad_sample_mode, "world_size": world_size,
               "rng": "secure (OS entropy, opacus secure_mode)" if dp.secure_rng else "seeded (finetune.seed)"}
    if requested == "auto":  # what auto chose, and why where it is not bk
        privacy["grad_sample_mode_requested"] = requested
        if why:
            privacy["grad_sample_mode_reason"] = why
    ledger = Ledger(net) if dp.grad_sample_mode == "bk" else None
    return Private(net, opt, accountant, noise, privacy, dp.grad_sample_mode, ledger)


def spent(private: Private) -> dict:
    """The run's privacy record, completed with the accountant's epsilon at delta and its profile."""
    acc = private.accountant
    return {**private.privacy, "epsilon_spent": float(acc.get_epsilon(delta=private.privacy["delta"])),
            "accounted_steps": int(sum(h[-1] for h in acc.history)), "profile": privacy_profile(acc)}
