"""The fine-tuning loop: Poisson-sampled logical batches, length-bucketed physical chunks, and
either non-private AdamW (averaged-gradient clipping) or opacus DP-SGD/DP-Adam.

Sampling: at every step each training example is included independently with probability
q = batch_size / n (Poisson sampling, as the DP accountant assumes), from a seeded generator. The
same sampler is used without DP, so DP and non-DP runs differ only in clipping and noise.

Checkpoints hold everything a resumed run needs to continue bit-for-bit: trainable weights,
optimizer moments, the sampler's and the noise generator's states and the accountant's history.

DP: the model is wrapped in opacus' GradSampleModule, the optimizer in opacus' DPOptimizer and its
accountant (PRV or RDP) is stepped by the optimizer's hook once per logical step with sample rate
q. A logical batch is processed in chunks (opacus' virtual steps, ``signal_skip_step``), so memory
holds only one chunk's per-sample gradients; clipping is per example, noise is added once per
logical step, and the sum is divided by the expected batch size q*n.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import time
import warnings
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..errors import ConfigError
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
    resumed_from: int = 0


def per_sample_losses(model, batch) -> torch.Tensor:
    """Mean token NLL of each example in the chunk over its labelled positions -> (B,)."""
    hidden, new_logits = model(batch["input_ids"], batch["attention_mask"])
    inner = getattr(model, "_module", model)  # opacus' GradSampleModule wraps the CanaryLM
    lp = inner.logprobs_at(hidden, new_logits, batch["rows"], batch["cols"], batch["targets"])
    B = batch["batch_size"]
    nll = per_example_sums(-lp, batch["rows"], B)
    count = per_example_sums(torch.ones_like(lp), batch["rows"], B).clamp(min=1)
    return nll / count


@functools.lru_cache(maxsize=64)
def calibrate_sigma(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """Noise multiplier that spends exactly (epsilon, delta) over ``steps`` steps at rate q."""
    from opacus.accountants.utils import get_noise_multiplier

    warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
    return float(get_noise_multiplier(
        target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps,
        accountant=accountant, epsilon_tolerance=0.005,
    ))


def privacy_profile(accountant, deltas=tuple(10.0 ** -k for k in range(1, 11))) -> list[dict]:
    """epsilon(delta) of the run's (sigma, q, T), as the accountant computes it (upper bounds).

    PRV: the composed privacy-loss distribution is discretised once, at the error the smallest delta
    needs, and queried for every delta (opacus' get_epsilon would rebuild it per delta)."""
    warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
    get_dprv = getattr(accountant, "_get_dprv", None)
    if get_dprv is None:
        return [{"delta": float(d), "epsilon": float(accountant.get_epsilon(delta=float(d)))} for d in deltas]
    dprv = get_dprv(eps_error=0.01, delta_error=min(deltas) / 1000)
    return [{"delta": float(d), "epsilon": float(dprv.compute_epsilon(d, min(deltas) / 1000, 0.01)[2])} for d in deltas]


def make_optimizer(params, name: str, lr: float, weight_decay: float, momentum: float = 0.0):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}")


def examples_fingerprint(examples: Sequence[Example]) -> str:
    h = hashlib.sha1()
    for e in examples:
        h.update(e.ids.tobytes())
        h.update(e.labels.tobytes())
    return h.hexdigest()


@dataclass
class Checkpointer:
    """A resumable training state on disk, valid only for the same inputs (``fingerprint``)."""

    path: Path
    every: int
    fingerprint: str

    def load(self) -> dict | None:
        if not self.path.is_file():
            return None
        state = torch.load(self.path, map_location="cpu", weights_only=False)
        return state if state.get("fingerprint") == self.fingerprint else None

    def save(self, state: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        torch.save({**state, "fingerprint": self.fingerprint}, tmp)
        os.replace(tmp, self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


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
    sample_rate: float | None = None,
    optimizer: str = "adamw",
    momentum: float = 0.0,
    checkpoint: Checkpointer | None = None,
    on_step: Callable[[dict], None] | None = None,
    scheduled: Sequence[Example] = (),
    repetitions: int = 1,
) -> TrainResult:
    """Train ``model`` (a CanaryLM already on its device) in place; returns what happened."""
    device = next(model.parameters()).device
    n = len(examples)
    q = sample_rate if sample_rate is not None else batch_size / n
    if not 0 < q <= 1:
        raise ConfigError(f"finetune.batch_size: {batch_size} examples per step out of n={n} gives q = {q:.3g} > 1")
    expected = q * n
    rng = np.random.default_rng(seed)
    # examples on a fixed schedule (canaries inserted a fixed number of times, non-DP only): example j
    # joins the batches of `repetitions` distinct steps drawn once, up front, from a separate stream
    schedule: dict[int, list[int]] = {}
    if scheduled:
        if dp is not None and dp.enabled:
            raise ConfigError("finetune.canary_insertion: a fixed schedule is not covered by the DP accountant")
        srng = np.random.default_rng([seed, 17])
        for j in range(len(scheduled)):
            for s in srng.choice(steps, size=min(repetitions, steps), replace=False):
                schedule.setdefault(int(s), []).append(n + j)
        examples = list(examples) + list(scheduled)
    lengths = [len(e) for e in examples]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, optimizer, lr, weight_decay, momentum)
    privacy: dict = {"dp": False}
    net, accountant, noise_gen = model, None, None
    if dp is not None and dp.enabled:
        from opacus import GradSampleModule
        from opacus.accountants import create_accountant
        from opacus.optimizers import DPOptimizer
        from opacus.validators import ModuleValidator

        delta = dp.delta if dp.delta is not None else n ** -1.1
        sigma = calibrate_sigma(dp.epsilon, delta, q, steps, dp.accountant)
        from .grad_samplers import register_for

        register_for(model)  # exact per-example grads for RMSNorm weights (full fine-tuning)
        errors = ModuleValidator.validate(model, strict=False)
        if errors:
            raise ValueError(f"model is not DP-compatible: {errors[0]}")
        net = GradSampleModule(model, batch_first=True, loss_reduction="mean")
        noise_gen = torch.Generator(device=device).manual_seed(seed + 1)
        opt = DPOptimizer(opt, noise_multiplier=sigma, max_grad_norm=dp.max_grad_norm,
                          expected_batch_size=max(1, int(round(expected))), loss_reduction="mean",
                          generator=noise_gen)
        accountant = create_accountant(mechanism=dp.accountant)
        opt.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=q))
        privacy = {"dp": True, "target_epsilon": dp.epsilon, "delta": delta, "noise_multiplier": sigma,
                   "max_grad_norm": dp.max_grad_norm, "accountant": dp.accountant, "sample_rate": q,
                   "steps": steps, "expected_batch_size": expected, "optimizer": f"DP-{optimizer}"}
    log: list[dict] = []
    start = 0
    state = checkpoint.load() if checkpoint else None
    if state is not None:  # resume exactly: weights, optimizer moments, samplers, noise, accountant
        named = dict(model.named_parameters())
        with torch.no_grad():
            for k, v in state["trainable"].items():
                named[k].copy_(v)
        opt.load_state_dict(state["optimizer"])
        rng.bit_generator.state = state["sampler"]
        torch.set_rng_state(state["torch_rng"])
        if noise_gen is not None:
            noise_gen.set_state(state["noise_rng"])
        if accountant is not None:
            accountant.history = list(state["accountant"])
        log, start = state["log"], state["step"]
    # opacus' hooks on the new-token embedding fire on output grads only (its input is integer ids)
    warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed")
    net.train()
    t0 = time.time()
    bar = tqdm(range(start, steps), desc="fine-tune" + (" (DP)" if privacy["dp"] else ""), mininterval=5,
               initial=start, total=steps)
    for step in bar:
        ts = time.time()
        idx = np.flatnonzero(rng.random(n) < q)
        if schedule:
            idx = np.concatenate([idx, np.asarray(schedule.get(step, []), dtype=np.int64)])
        parts = chunks(idx, lengths, physical_batch_size)
        losses = []
        if privacy["dp"]:
            if not parts:  # empty Poisson batch: the step still adds noise
                for p in params:
                    p.grad_sample = torch.zeros((0, *p.shape), device=p.device, dtype=p.dtype)
                opt.step()
                opt.zero_grad()
            for j, part in enumerate(parts):
                batch = collate([examples[i] for i in part], pad_id, device)
                with autocast(device):
                    ls = per_sample_losses(net, batch)
                ls.mean().backward()  # opacus 'mean' rescales by the chunk size -> per-example grads
                opt.signal_skip_step(do_skip=j < len(parts) - 1)
                opt.step()
                opt.zero_grad()
                losses.append(ls.detach())
        else:
            for part in parts:
                batch = collate([examples[i] for i in part], pad_id, device)
                with autocast(device):
                    ls = per_sample_losses(net, batch)
                (ls.sum() / expected).backward()
                losses.append(ls.detach())
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
        loss = float(torch.cat(losses).mean()) if losses else float("nan")
        rec = {"step": step + 1, "batch": int(len(idx)), "loss": loss, "seconds": round(time.time() - ts, 3)}
        log.append(rec)
        if checkpoint and checkpoint.every and (step + 1) % checkpoint.every == 0 and step + 1 < steps:
            checkpoint.save({
                "step": step + 1, "log": log, "trainable": {k: v.detach().cpu().clone() for k, v in
                                                          model.named_parameters() if v.requires_grad},
                "optimizer": opt.state_dict(), "sampler": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                "noise_rng": noise_gen.get_state() if noise_gen is not None else None,
                "accountant": list(accountant.history) if accountant is not None else None})
        if on_step:
            on_step(rec)
        bar.set_postfix(loss=f"{loss:.3f}", batch=len(idx), refresh=False)
    if accountant is not None:
        privacy["epsilon_spent"] = float(accountant.get_epsilon(delta=privacy["delta"]))
        privacy["accounted_steps"] = int(sum(h[-1] for h in accountant.history))
        privacy["profile"] = privacy_profile(accountant)
    if checkpoint:
        checkpoint.clear()
    return TrainResult(steps=steps, sample_rate=q, expected_batch_size=expected, n_examples=n,
                       seconds=time.time() - t0, privacy=privacy, log=log, resumed_from=start)


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
