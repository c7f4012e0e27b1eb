"""Deliberately broken DP mechanisms for the engine self-check (tests/finetune/test_selfcheck.py and
benchmarks/selfcheck_mutants.py). They live here, never in the product: each is a context manager that patches
the real engine (opacus or the project's own code) for as long as it is entered.

* ``noise_halved``: every noise draw has half the standard deviation the optimizer (and accountant) use;
* ``clip_off``: one module's per-example gradients are summed unclipped (hooks: opacus' clip_and_accumulate;
  bk: the project's book-keeping ledger);
* ``accountant_q``: the accountant is told q / 10 while the sampler draws at q (sigma unchanged);
* ``rank_noise`` (2 processes): noise is added after the gradient all-reduce, on rank 1 only, so rank 0 (whose
  model is written) steps on the noiseless sum.

Run as ``python -m mutants <spec.json> <out.npz>`` (``tests/`` on the path, ``SELFCHECK_MUTANT`` naming the
mutant), it is a torchrun worker of the self-check with the mutant in place.
"""
from __future__ import annotations

import contextlib
import os
import sys
from unittest.mock import patch

import torch

MUTANTS = ("noise_halved", "clip_off", "accountant_q", "rank_noise")
#: the module whose clipping ``clip_off`` removes (a parameter-name fragment of the probe model)
UNCLIPPED = "new_head"


@contextlib.contextmanager
def noise_halved():
    import opacus.optimizers.optimizer as plain
    import opacus.optimizers.optimizer_fast_gradient_clipping as fast

    real = plain._generate_noise

    def half(std, reference, generator=None, secure_mode=False):
        return real(std / 2, reference, generator, secure_mode)

    with patch.object(plain, "_generate_noise", half), patch.object(fast, "_generate_noise", half):
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

    with patch.object(DistributedDPOptimizer, "add_noise", add_noise), \
            patch.object(DistributedDPOptimizer, "reduce_gradients", reduce_gradients):
        yield


def mutant(name: str):
    return {"noise_halved": noise_halved, "clip_off": clip_off, "accountant_q": accountant_q,
            "rank_noise": rank_noise}[name]()


if __name__ == "__main__":
    from stages.finetune.selfcheck import worker

    with mutant(os.environ["SELFCHECK_MUTANT"]):
        worker(sys.argv[1:])
