"""The fine-tuning loop: Poisson-sampled logical batches, length-bucketed physical chunks, and
either non-private AdamW (averaged-gradient clipping) or opacus DP-SGD/DP-Adam.

Sampling: at every step each training example is included independently with probability
q = batch_size / n (Poisson sampling, as the DP accountant assumes), from a seeded generator. The
same sampler is used without DP, so DP and non-DP runs differ only in clipping and noise.

DP: the model is wrapped in opacus' GradSampleModule, the optimizer in opacus' DPOptimizer and its
accountant (PRV or RDP) is stepped by the optimizer's hook once per logical step with sample rate
q. A logical batch is processed in chunks (opacus' virtual steps, ``signal_skip_step``), so memory
holds only one chunk's per-sample gradients; clipping is per example, noise is added once per
logical step, and the sum is divided by the expected batch size q*n.
"""
from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from .batching import chunks, collate
from .examples import Example
from .scoring import autocast, per_example_sums


@dataclass
class TrainResult:
    steps: int
    sample_rate: float
    expected_batch_size: float
    n_examples: int
    seconds: float
    privacy: dict = field(default_factory=dict)
    log: list = field(default_factory=list)


def per_sample_losses(model, batch) -> torch.Tensor:
    """Mean token NLL of each example in the chunk over its labelled positions -> (B,)."""
    hidden, new_logits = model(batch["input_ids"], batch["attention_mask"])
    inner = getattr(model, "_module", model)  # opacus' GradSampleModule wraps the CanaryLM
    lp = inner.logprobs_at(hidden, new_logits, batch["rows"], batch["cols"], batch["targets"])
    B = batch["batch_size"]
    nll = per_example_sums(-lp, batch["rows"], B)
    count = per_example_sums(torch.ones_like(lp), batch["rows"], B).clamp(min=1)
    return nll / count


def calibrate_sigma(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """Noise multiplier that spends exactly (epsilon, delta) over ``steps`` steps at rate q."""
    from opacus.accountants.utils import get_noise_multiplier

    warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
    return float(get_noise_multiplier(
        target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps,
        accountant=accountant, epsilon_tolerance=0.005,
    ))


def train(
    model,
    examples: Sequence[Example],
    *,
    steps: int,
    batch_size: int,
    physical_batch_size: int,
    lr: float,
    weight_decay: float,
    clip_norm: float,
    seed: int,
    pad_id: int,
    dp=None,
    on_step: Callable[[dict], None] | None = None,
) -> TrainResult:
    """Train ``model`` (a CanaryLM already on its device) in place; returns what happened."""
    device = next(model.parameters()).device
    n = len(examples)
    q = min(1.0, batch_size / n)
    expected = q * n
    lengths = [len(e) for e in examples]
    rng = np.random.default_rng(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    privacy: dict = {"dp": False}
    net = model
    if dp is not None and dp.enabled:
        from opacus import GradSampleModule
        from opacus.accountants import create_accountant
        from opacus.optimizers import DPOptimizer
        from opacus.validators import ModuleValidator

        delta = dp.delta if dp.delta is not None else n ** -1.1
        sigma = calibrate_sigma(dp.epsilon, delta, q, steps, dp.accountant)
        errors = ModuleValidator.validate(model, strict=False)
        if errors:
            raise ValueError(f"model is not DP-compatible: {errors[0]}")
        net = GradSampleModule(model, batch_first=True, loss_reduction="mean")
        noise_gen = torch.Generator(device=device).manual_seed(seed + 1)
        optimizer = DPOptimizer(optimizer, noise_multiplier=sigma, max_grad_norm=dp.max_grad_norm,
                                expected_batch_size=int(round(expected)), loss_reduction="mean",
                                generator=noise_gen)
        # DPOptimizer divides by an integer expected batch; we keep the exact q*n in the record
        accountant = create_accountant(mechanism=dp.accountant)
        optimizer.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=q))
        privacy = {"dp": True, "target_epsilon": dp.epsilon, "delta": delta, "noise_multiplier": sigma,
                   "max_grad_norm": dp.max_grad_norm, "accountant": dp.accountant, "sample_rate": q,
                   "steps": steps, "expected_batch_size": expected}
    # opacus' hooks on the new-token embedding fire on output grads only (its input is integer ids)
    warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed")
    net.train()
    log = []
    t0 = time.time()
    bar = tqdm(range(steps), desc="fine-tune" + (" (DP)" if privacy["dp"] else ""), mininterval=5)
    for step in bar:
        ts = time.time()
        idx = np.flatnonzero(rng.random(n) < q)
        parts = chunks(idx, lengths, physical_batch_size)
        losses = []
        if privacy["dp"]:
            if not parts:  # empty Poisson batch: the step still adds noise
                for p in params:
                    p.grad_sample = torch.zeros((0, *p.shape), device=p.device, dtype=p.dtype)
                optimizer.step()
                optimizer.zero_grad()
            for j, part in enumerate(parts):
                batch = collate([examples[i] for i in part], pad_id, device)
                with autocast(device):
                    ls = per_sample_losses(net, batch)
                ls.mean().backward()  # opacus 'mean' rescales by the chunk size -> per-example grads
                optimizer.signal_skip_step(do_skip=j < len(parts) - 1)
                optimizer.step()
                optimizer.zero_grad()
                losses.append(ls.detach())
        else:
            for part in parts:
                batch = collate([examples[i] for i in part], pad_id, device)
                with autocast(device):
                    ls = per_sample_losses(net, batch)
                (ls.sum() / expected).backward()
                losses.append(ls.detach())
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        loss = float(torch.cat(losses).mean()) if losses else float("nan")
        rec = {"step": step + 1, "batch": int(len(idx)), "loss": loss, "seconds": round(time.time() - ts, 3)}
        log.append(rec)
        if on_step:
            on_step(rec)
        bar.set_postfix(loss=f"{loss:.3f}", batch=len(idx))
    if privacy["dp"]:
        privacy["epsilon_spent"] = float(accountant.get_epsilon(delta=privacy["delta"]))
        privacy["accounted_steps"] = int(sum(h[-1] for h in accountant.history))
    return TrainResult(steps=steps, sample_rate=q, expected_batch_size=expected, n_examples=n,
                       seconds=time.time() - t0, privacy=privacy, log=log)


def mean_nll(model, examples: Sequence[Example], pad_id: int, batch_size: int = 64) -> dict:
    """Token-level mean NLL and perplexity over the labelled positions of ``examples``."""
    from .scoring import token_logprobs

    if not examples:
        return {"tokens": 0, "nll": None, "perplexity": None}
    lps = token_logprobs(model, examples, pad_id, batch_size)
    tokens = sum(len(x) for x in lps)
    nll = -float(sum(x.sum() for x in lps)) / max(tokens, 1)
    return {"tokens": tokens, "nll": nll, "perplexity": math.exp(nll)}


def write_log(path, log: list[dict]) -> None:
    with open(path, "w") as fh:
        for rec in log:
            fh.write(json.dumps(rec) + "\n")
