"""Deliberately broken DP mechanisms for the engine self-check (tests/tools/selfcheck/test_selfcheck.py and
benchmarks/selfcheck_mutants.py). They live here, never in the product: each is a context manager that patches
the real engine (opacus or the project's own code) for as long as it is entered.

* ``noise_halved``, ``noise_x0.9``, ``noise_x0.95``: every noise draw has that multiple of the standard deviation the
  optimizer (and accountant) use;
* ``sensitivity_sqrt2``: every example is clipped to sqrt(2) C while the noise is still sigma C (a missed sqrt 2 in
  the sensitivity);
* ``resume_noise``: a resumed run's noise generator is not restored from its checkpoint, so it draws the noise of
  the run's first steps again;
* ``sampler_q``: the Poisson sampler draws at 1.2 q while the accountant books q;
* ``cross_terms``: the per-example norm of a Linear layer over a sequence drops the cross-position terms
  (sum_t |g_t|^2 |a_t|^2 instead of |sum_t g_t a_t^T|^2): the norm pass that ghost and book-keeping share;
* ``clip_off``: one module's per-example gradients are summed unclipped (hooks: opacus' clip_and_accumulate;
  bk: the project's book-keeping ledger);
* ``accountant_q``: the accountant is told q / 10 while the sampler draws at q (sigma unchanged);
* ``rank_noise`` (2 processes; hooks' and ghost / bk's distributed optimizers): noise is added after the gradient
  all-reduce, on rank 1 only, so rank 0 (whose model is written) steps on the noiseless sum; in FSDP (ghost_fsdp's
  optimizer, each rank holding a shard) rank 1 adds no noise to its shard;
* ``user_clip_per_example`` (user-level DP): a user's rows are clipped one by one (each to C) instead of their sum,
  while the accountant and the noise still treat the user as the unit of sensitivity C.

Bugs DP libraries shipped in 2026 (each described by the report it models):

* ``divisor_n`` (opacus#819): the noisy sum is divided by q x the size of the data set trained on, not by q x the
  public candidate pool;
* ``noise_on_mean`` (jax_privacy#383): noise calibrated for the clipped sum is added to the mean;
* ``ignore_index`` (opacus#808): under ghost clipping the norms come from the loss averaged over every position, the
  masked (-100) ones included, while the clipped sum is the masked mean's;
* ``shuffled_batches`` (Hu et al. 2025's code): shuffled fixed-size batches, each example once an epoch, while the
  accountant books Poisson sampling;
* ``lora_device_late`` (opacus#820, peft#3409): the model reaches its device after the DP wrapping and its LoRA
  weights never change: not a privacy failure, caught by tests/finetune/test_device_order.py, not the self-check.

Run as ``python -m mutants <spec.json> <out.npz>`` (``tests/`` on the path, ``SELFCHECK_MUTANT`` naming the
mutant), it is a torchrun worker of the self-check with the mutant in place.
"""
from __future__ import annotations

import contextlib
import os
import sys
from unittest.mock import patch

import torch

MUTANTS = ("noise_halved", "noise_x0.9", "noise_x0.95", "sensitivity_sqrt2", "resume_noise", "sampler_q",
           "cross_terms", "clip_off", "accountant_q", "rank_noise", "user_clip_per_example", "divisor_n",
           "noise_on_mean", "ignore_index", "shuffled_batches", "lora_device_late")
#: the module whose clipping ``clip_off`` removes (a parameter-name fragment of the probe model)
UNCLIPPED = "new_head"


@contextlib.contextmanager
def noise_scaled(factor: float):
    import opacus.optimizers.optimizer as plain
    import opacus.optimizers.optimizer_fast_gradient_clipping as fast

    real = plain._generate_noise

    def scaled(std, reference, generator=None, secure_mode=False):
        return real(std * factor, reference, generator, secure_mode)

    with patch.object(plain, "_generate_noise", scaled), patch.object(fast, "_generate_noise", scaled):
        yield


@contextlib.contextmanager
def sensitivity_sqrt2():
    import opacus.optimizers.optimizer as plain
    import opacus.optimizers.optimizer_fast_gradient_clipping as fast

    import stages.finetune.loop as loop

    real, real_noise = loop.make_private, plain._generate_noise

    def make_private(*args, **kwargs):  # clip at sqrt(2) C (optimizer and, for ghost / bk, the coefficients) ...
        private = real(*args, **kwargs)
        private.optimizer.max_grad_norm *= 2 ** 0.5
        if hasattr(private.net, "max_grad_norm"):
            private.net.max_grad_norm *= 2 ** 0.5
        return private

    def noise(std, reference, generator=None, secure_mode=False):  # ... while the noise stays sigma C
        return real_noise(std / 2 ** 0.5, reference, generator, secure_mode)

    with patch.object(loop, "make_private", make_private), patch.object(plain, "_generate_noise", noise), \
            patch.object(fast, "_generate_noise", noise):
        yield


@contextlib.contextmanager
def resume_noise():
    import stages.finetune.loop as loop

    real = loop.restore

    def restore(state, model, opt, sampler, noise, accountant):  # the noise generator keeps its fresh seed
        return real(state, model, opt, sampler, None, accountant)

    with patch.object(loop, "restore", restore):
        yield


@contextlib.contextmanager
def sampler_q(factor: float = 1.2):
    import stages.finetune.loop as loop

    real = loop.poisson_draw

    def draw(rng, n, q):
        return real(rng, n, min(1.0, q * factor))

    with patch.object(loop, "poisson_draw", draw):
        yield


def _linear_norm_without_cross_terms(layer, activations, backprops):
    a = activations[0].to(backprops.dtype)
    if backprops.dim() == 2:
        return _real_linear_norm()(layer, activations, backprops)
    ret = {}
    if layer.weight.requires_grad:  # sum over positions of |g_t|^2 |a_t|^2: no (s, t) cross terms
        ret[layer.weight] = torch.sqrt(((backprops ** 2).sum(-1) * (a ** 2).sum(-1)).sum(1))
    if layer.bias is not None and layer.bias.requires_grad:
        ret[layer.bias] = torch.sqrt((backprops ** 2).sum((1, 2)))
    return ret


def _real_linear_norm():
    from opacus.grad_sample.linear import compute_linear_norm_sample

    return compute_linear_norm_sample


@contextlib.contextmanager
def cross_terms():
    from opacus.grad_sample import GradSampleModuleFastGradientClipping as GSM

    with patch.dict(GSM.NORM_SAMPLERS, {torch.nn.Linear: _linear_norm_without_cross_terms}):
        yield


def _clip_and_accumulate_except(unclipped: str):
    """opacus' DPOptimizer.clip_and_accumulate (1.6), except that parameters named ``unclipped`` keep factor 1."""
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    def clip_and_accumulate(self):
        norms = [g.reshape(len(g), -1).norm(2, dim=-1) for g in self.grad_samples]
        factor = (self.max_grad_norm / (torch.stack(norms, dim=1).norm(2, dim=1) + 1e-6)).clamp(max=1.0)
        names = getattr(self, "_mutant_names", {})
        for p in self.params:
            _check_processed_flag(p.grad_sample)
            gs = self._get_flat_grad_sample(p).to(p.dtype)
            f = torch.ones_like(factor) if unclipped in names.get(id(p), "") else factor
            grad = torch.einsum("i,i...", f.to(p.dtype), gs)
            p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
            _mark_as_processed(p.grad_sample)

    return clip_and_accumulate


@contextlib.contextmanager
def clip_off():
    from opacus.optimizers.optimizer import DPOptimizer

    import stages.finetune.loop as loop
    from stages.finetune.privacy.bookkeeping import Ledger, weighted_grads

    real_make_private = loop.make_private
    unclipped: list = []

    def make_private(model, *args, **kwargs):  # remember which parameters are the unclipped module's
        unclipped[:] = [p for n, p in model.named_parameters() if UNCLIPPED in n]
        private = real_make_private(model, *args, **kwargs)
        private.optimizer._mutant_names = {id(p): n for n, p in model.named_parameters()}
        return private

    def settle(self, coef):  # the project's Ledger.settle, with factor 1 for the unclipped module
        while self.entries:
            module, a, g = self.entries.pop()
            c = torch.ones_like(coef) if any(p is getattr(module, "weight", None) for p in unclipped) else coef
            c = c.to(device=g.device, dtype=torch.float32).reshape(-1, *([1] * (g.dim() - 1)))
            for p, grad in weighted_grads(module)(module, a, g.float() * c).items():
                grad = grad.to(p.dtype)
                p.grad = grad if p.grad is None else p.grad.add_(grad)

    with patch.object(DPOptimizer, "clip_and_accumulate", _clip_and_accumulate_except(UNCLIPPED)), \
            patch.object(loop, "make_private", make_private), patch.object(Ledger, "settle", settle):
        yield


@contextlib.contextmanager
def accountant_q(factor: float = 0.1):
    from opacus.accountants import PRVAccountant, RDPAccountant

    patches = []
    for cls in (PRVAccountant, RDPAccountant):
        real = cls.get_optimizer_hook_fn

        def told(self, sample_rate, _real=real):
            return _real(self, sample_rate=sample_rate * factor)

        patches.append(patch.object(cls, "get_optimizer_hook_fn", told))
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        yield


@contextlib.contextmanager
def rank_noise():
    from opacus.optimizers.ddpoptimizer import DistributedDPOptimizer
    from opacus.optimizers.ddpoptimizer_fast_gradient_clipping import DistributedDPOptimizerFastGradientClipping
    from opacus.optimizers.fsdpoptimizer_fast_gradient_clipping import FSDPOptimizerFastGradientClipping
    from opacus.optimizers.optimizer import _generate_noise

    def add_noise(self):  # no noise before the reduction ...
        for p in self.params:
            p.grad = p.summed_grad.view_as(p)

    def reduce_gradients(self):  # ... and after it on rank 1 only: rank 0's model never sees any
        for p in self.params:
            torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)
            p.grad /= self.world_size
            if self.rank == 1:
                p.grad += _generate_noise(self.noise_multiplier * self.max_grad_norm, p.grad, self.generator) \
                    / (self.expected_batch_size * self.world_size)

    real_fsdp_noise = FSDPOptimizerFastGradientClipping.add_noise

    def add_fsdp_noise(self):  # rank 1's shard keeps the clipped sum without noise
        if self.rank != 1:
            return real_fsdp_noise(self)
        for p in self.params:
            p.grad = self.grad_state[p]["summed_grad"].view_as(p)

    with contextlib.ExitStack() as stack:  # the hooks mode's distributed optimizer and ghost / bk's
        for cls in (DistributedDPOptimizer, DistributedDPOptimizerFastGradientClipping):
            stack.enter_context(patch.object(cls, "add_noise", add_noise))
            stack.enter_context(patch.object(cls, "reduce_gradients", reduce_gradients))
        stack.enter_context(patch.object(FSDPOptimizerFastGradientClipping, "add_noise", add_fsdp_noise))
        yield


@contextlib.contextmanager
def user_clip_per_example():
    from stages.finetune.privacy.strategies import Hooks

    def group(self, private, units):  # per-example gradients left as they are: each row clipped on its own
        return None

    with patch.object(Hooks, "group", group):
        yield


# ------------------------------------------------------------------------------------- bugs shipped in 2026
@contextlib.contextmanager
def divisor_n():
    """opacus#819: the noisy clipped sum is divided by q x the size of the data set trained on (opacus: sample_rate x
    len(dataset)), a number the add/remove accounting does not cover, instead of q x the public candidate pool."""
    import dataclasses

    import stages.finetune.loop as loop

    real = loop.start_session

    def start_session(model, examples, config):  # the candidate pool forgotten: its q x n is the divisor
        return real(model, examples, dataclasses.replace(config, population=None))

    with patch.object(loop, "start_session", start_session):
        yield


@contextlib.contextmanager
def noise_on_mean():
    """jax_privacy#383: noise calibrated for the clipped sum (sigma C) is added to the mean (the sum / B), so every
    step is over-noised by the divisor B: not a leak, but the mechanism is not the one the accountant booked."""
    from opacus.optimizers.optimizer import DPOptimizer, _check_processed_flag, _generate_noise, _mark_as_processed
    from opacus.optimizers.optimizer_fast_gradient_clipping import DPOptimizerFastGradientClipping

    def add_noise(self):  # the mean first, then sigma C ...
        for p in self.params:
            _check_processed_flag(p.summed_grad)
            mean = p.summed_grad / (self.expected_batch_size * self.accumulated_iterations)
            noise = _generate_noise(self.noise_multiplier * self.max_grad_norm, p.summed_grad, self.generator,
                                    self.secure_mode)
            p.grad = (mean + noise).view_as(p)
            _mark_as_processed(p.summed_grad)

    def scale_grad(self):  # ... and nothing divided after it
        return None

    with contextlib.ExitStack() as stack:
        for cls in (DPOptimizer, DPOptimizerFastGradientClipping):
            stack.enter_context(patch.object(cls, "add_noise", add_noise))
            stack.enter_context(patch.object(cls, "scale_grad", scale_grad))
        yield


def _ghost_backward_norms_from(real):
    """stages/finetune/privacy/ghost.ghost_backward, except that its norm pass differentiates ``losses.norm_losses``
    (where a chunk's losses carry them) instead of the losses the clipped sum is formed from."""
    def ghost_backward(net, losses, targets, ledger=None):
        wrong = getattr(losses, "norm_losses", None)
        if wrong is None:
            return real(net, losses, targets, ledger)
        from stages.finetune.loss import unwrap

        params = net.trainable_parameters
        for p in params:
            p.__dict__.pop("_norm_sample", None)
        inner = unwrap(net)
        first = [inner.last_input] + targets if inner.last_input is not None else targets
        if ledger is not None:
            ledger.recording = True
        try:
            torch.autograd.grad(wrong.sum(), first, retain_graph=ledger is None, allow_unused=True)
        finally:
            if ledger is not None:
                ledger.recording = False
        inner.last_input = None
        coef = net.get_clipping_coef().to(losses.device)
        if ledger is not None:
            return ledger.settle(coef)
        net.disable_hooks()
        try:
            (coef * losses).sum().backward()
        finally:
            net.enable_hooks()

    return ghost_backward


@contextlib.contextmanager
def ignore_index():
    """opacus#808 (and #792): under fast gradient clipping the per-example loss whose gradient gives the norms is the
    mean over every position, the masked (-100) ones counted as zero loss, while the clipped sum is the masked mean's:
    the norms are those of the wrong loss (x labelled / positions), so each example is clipped to C x positions /
    labelled. Book-keeping forms its sum from the norm pass itself, consistently: a wrong objective, not a leak."""
    import stages.finetune.privacy.engine as engine
    import stages.finetune.privacy.ghost as ghost

    real_losses = engine.per_sample_losses

    def per_sample_losses(model, batch):
        losses = real_losses(model, batch)
        labelled = torch.bincount(batch["rows"], minlength=batch["batch_size"]).to(losses.dtype)
        losses.norm_losses = losses * labelled / batch["input_ids"].shape[1]  # opacus' loss_per_sample.mean(dim=1)
        return losses

    with patch.object(engine, "per_sample_losses", per_sample_losses), \
            patch.object(ghost, "ghost_backward", _ghost_backward_norms_from(ghost.ghost_backward)):
        yield


@contextlib.contextmanager
def shuffled_batches():
    """Hu et al. 2025's training code: each epoch shuffles the pool and steps through batches of round(q n), the last
    one the remainder (torch's DataLoader with shuffle, drop_last False), so every example is drawn exactly once an
    epoch, while the accountant books Poisson sampling at q. (Dropping the remainder instead, an epoch of one batch,
    2 round(q n) > n, is a fixed-size batch drawn afresh each step: its per-example counts are Bin(T, q) as Poisson's,
    which the self-check's inclusion test reads, so that form passes: a known blind spot, docs/results.md.)"""
    import numpy as np

    import stages.finetune.loop as loop

    epochs: dict = {}

    def draw(rng, n, q):
        size = max(1, int(round(q * n)))
        order, at = epochs.get(id(rng), (None, n))
        if at >= n:  # a new epoch
            order, at = rng.permutation(n), 0
        epochs[id(rng)] = (order, at + size)
        mask = np.zeros(n, dtype=bool)
        mask[order[at:at + size]] = True
        return mask

    with patch.object(loop, "poisson_draw", draw):
        yield


#: the LoRA weights' parameter-name fragment (peft)
LORA = "lora_"


@contextlib.contextmanager
def lora_device_late():
    """opacus#820 / peft#3409: hooks registered on a PEFT model before its parameters reach the device; on CUDA the
    LoRA weights then never change while the loss falls and epsilon accrues. On a CPU, where a move changes nothing,
    the effect is emulated: once the model is wrapped, its LoRA weights are replaced by copies (as a move that
    re-creates them does) that the model computes with and saves, while the DP optimizer keeps the originals, which
    take no further part. Not a privacy failure (the self-check does not judge it): tests/finetune/
    test_device_order.py catches it by checking that the LoRA weights change on the device used."""
    from torch import nn

    import stages.finetune.loop as loop

    real = loop.make_private

    def make_private(model, optimizer, *args, **kwargs):
        private = real(model, optimizer, *args, **kwargs)
        for name, module in model.named_modules():
            if LORA not in name:
                continue
            for key, p in list(module._parameters.items()):
                if p is not None and p.requires_grad:
                    moved = nn.Parameter(p.detach().clone())
                    moved.__dict__.update(p.__dict__)  # what opacus attached (its hooks now see the copy) ...
                    module._parameters[key] = moved
                    p.requires_grad_(False)  # ... while the optimizer's original takes no further part
        return private

    with patch.object(loop, "make_private", make_private):
        yield


def mutant(name: str):
    return {"noise_halved": lambda: noise_scaled(0.5), "noise_x0.9": lambda: noise_scaled(0.9),
            "noise_x0.95": lambda: noise_scaled(0.95), "sensitivity_sqrt2": sensitivity_sqrt2,
            "resume_noise": resume_noise, "sampler_q": sampler_q, "cross_terms": cross_terms, "clip_off": clip_off,
            "accountant_q": accountant_q, "rank_noise": rank_noise,
            "user_clip_per_example": user_clip_per_example, "divisor_n": divisor_n, "noise_on_mean": noise_on_mean,
            "ignore_index": ignore_index, "shuffled_batches": shuffled_batches,
            "lora_device_late": lora_device_late}[name]()


if __name__ == "__main__":
    from stages.tools.selfcheck.trials import worker

    with mutant(os.environ["SELFCHECK_MUTANT"]):
        worker(sys.argv[1:])
