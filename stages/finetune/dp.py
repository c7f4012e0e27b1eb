"""Differential privacy for the fine-tuning loop, all through opacus: sigma calibrated by the accountant,
the model wrapped for per-example gradients, the optimizer for clipping and noise, and the accountant
stepped once per logical step at the Poisson rate q.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


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
    """A model and optimizer made private: ``net`` computes per-example gradients, ``optimizer`` clips and
    noises them (noise from ``noise``, a seeded generator), ``accountant`` tracks the spend."""

    net: torch.nn.Module
    optimizer: object
    accountant: object
    noise: torch.Generator
    privacy: dict


def make_private(model, optimizer, dp, *, sample_rate: float, steps: int, n: int, population: int, seed: int,
                 optimizer_name: str, device) -> Private:
    """Wrap ``model``/``optimizer`` for DP-SGD (or DP-Adam) at (dp.epsilon, delta) with delta = dp.delta or
    population^-1.1 (``n``: the examples actually in the pool, so q * n is the expected batch)."""
    from opacus import GradSampleModule
    from opacus.accountants import create_accountant
    from opacus.optimizers import DPOptimizer
    from opacus.validators import ModuleValidator

    from .grad_samplers import register_for

    expected = sample_rate * n
    delta = dp.delta if dp.delta is not None else population ** -1.1
    sigma = calibrate_sigma(dp.epsilon, delta, sample_rate, steps, dp.accountant)
    register_for(model)  # exact per-example grads for RMSNorm weights (full fine-tuning)
    errors = ModuleValidator.validate(model, strict=False)
    if errors:
        raise ValueError(f"model is not DP-compatible: {errors[0]}")
    net = GradSampleModule(model, batch_first=True, loss_reduction="mean")
    noise = torch.Generator(device=device).manual_seed(seed + 1)
    opt = DPOptimizer(optimizer, noise_multiplier=sigma, max_grad_norm=dp.max_grad_norm,
                      expected_batch_size=max(1, int(round(expected))), loss_reduction="mean", generator=noise)
    accountant = create_accountant(mechanism=dp.accountant)
    opt.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=sample_rate))
    privacy = {"dp": True, "target_epsilon": dp.epsilon, "delta": delta, "noise_multiplier": sigma,
               "max_grad_norm": dp.max_grad_norm, "accountant": dp.accountant, "sample_rate": sample_rate,
               "steps": steps, "expected_batch_size": expected, "optimizer": f"DP-{optimizer_name}"}
    return Private(net, opt, accountant, noise, privacy)


def spent(private: Private) -> dict:
    """The run's privacy record, completed with the accountant's epsilon at delta and its profile."""
    acc = private.accountant
    return {**private.privacy, "epsilon_spent": float(acc.get_epsilon(delta=private.privacy["delta"])),
            "accounted_steps": int(sum(h[-1] for h in acc.history)), "profile": privacy_profile(acc)}
