"""The fine-tuning loop: Poisson-sampled logical batches, length-bucketed physical chunks, and
either non-private AdamW (averaged-gradient clipping) or opacus DP-SGD/DP-Adam.

Sampling: at every step each training example is included independently with probability
q = batch_size / n (Poisson sampling, as the DP accountant assumes), from a seeded generator. The
same sampler is used without DP, so DP and non-DP runs differ only in clipping and noise.

DP (``dp.py``): the model is wrapped by opacus for per-example clipping, the optimizer in opacus'
DPOptimizer and its accountant (PRV or RDP) is stepped by the optimizer's hook once per logical step with
sample rate q. A logical batch is processed in chunks (opacus' virtual steps, ``signal_skip_step``);
clipping is per example, noise is added once per logical step, and the sum is divided by the expected
batch size q * population of the fixed candidate pool (a public constant; ``dp.public_divisor``). Three ways to clip (``finetune.dp.grad_sample_mode``):

* ``hooks``: opacus' GradSampleModule materialises every per-example gradient of a chunk;
* ``ghost``: opacus' ghost clipping computes only per-example gradient norms (from each layer's
  activations and output gradients), then backpropagates the loss weighted by the clipping factors: the
  gradient is the clipped sum without any per-example gradient in memory. The norm pass stops at the
  decoder's input embeddings (``ghost_backward``): it needs output gradients, not weight gradients, so
  it computes none of the Linear layers' weight gradients, which the second pass computes once.
* ``bk``: book-keeping (``bookkeeping.py``): ghost clipping's norm pass, then the clipped sum formed from
  the activations and output gradients that pass already had, instead of a second backward pass.

Data-parallel (``world_size`` > 1, under torchrun): every rank draws the same Poisson batch from the same
seeded generator and trains its share (every world_size-th sampled example), so the logical batch is the
single-process one; gradients are summed over ranks (opacus' distributed optimizers under DP: noise added
by rank 0 only).

Checkpoints (``checkpoint.py``) let a killed run resume bit-for-bit.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..core.errors import ConfigError
from ..lm.batching import chunks, collate
from ..lm.examples import Example
from ..lm.scoring import autocast, per_example_sums, token_logprobs
from .checkpoint import Checkpointer, restore, snapshot
from .diagnostics import inclusion_counts
from .dp import NORM_PASS_MODES, make_private, secure_seed, spent


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
    #: steps that sampled each example (the pool, then the scheduled ones): diagnostics.inclusion_counts
    inclusions: np.ndarray | None = None


def unwrap(model):
    """The CanaryLM inside opacus' wrappers (GradSampleModule ``_module``, DPDDP ``module``)."""
    while not hasattr(model, "logprobs_at"):
        model = getattr(model, "_module", None) or model.module
    return model


def per_sample_losses(model, batch) -> torch.Tensor:
    """Mean token NLL of each example in the chunk over its labelled positions -> (B,)."""
    hidden, new_logits = model(batch["input_ids"], batch["attention_mask"])
    inner = unwrap(model)
    lp = inner.logprobs_at(hidden, new_logits, batch["rows"], batch["cols"], batch["targets"])
    B = batch["batch_size"]
    nll = per_example_sums(-lp, batch["rows"], B)
    count = per_example_sums(torch.ones_like(lp), batch["rows"], B).clamp(min=1)
    return nll / count


def dp_record(step: int) -> dict:
    """A DP step's log line: its index only. The batch size, token count, loss and step time are functions of the
    private data that the accountant does not cover, so a DP run's log (a published artifact) holds none of them."""
    return {"step": step}


def make_optimizer(params, name: str, lr: float, weight_decay: float, momentum: float = 0.0):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}")


def poisson_rate(n: int, batch_size: int, sample_rate: float | None) -> float:
    q = sample_rate if sample_rate is not None else batch_size / n
    if not 0 < q <= 1:
        raise ConfigError(f"finetune.batch_size: {batch_size} examples per step out of n={n} gives q = {q:.3g} > 1")
    return q


def fixed_schedule(first: int, count: int, steps: int, repetitions: int, seed: int) -> dict[int, list[int]]:
    """step -> indices (``first`` .. ``first + count - 1``) of examples on a fixed schedule: each joins the
    batches of ``repetitions`` distinct steps drawn once, up front, from a stream separate from the sampler."""
    schedule: dict[int, list[int]] = {}
    srng = np.random.default_rng([seed, 17])
    for j in range(count):
        for s in srng.choice(steps, size=min(repetitions, steps), replace=False):
            schedule.setdefault(int(s), []).append(first + j)
    return schedule


def norm_pass_targets(model) -> list[torch.Tensor]:
    """What the ghost norm pass differentiates towards: every trainable parameter that is not a Linear (or
    Conv1D) layer's (embeddings, norms, soft prompt, prefix). With the decoder's input embeddings added per chunk,
    autograd then reaches every layer's output gradient but skips the Linear weight gradients."""
    from .grad_samplers import is_conv1d

    linear = {id(p) for m in model.modules() if isinstance(m, torch.nn.Linear) or is_conv1d(m)
              for p in m.parameters(recurse=False)}
    return [p for p in model.parameters() if p.requires_grad and id(p) not in linear]


def ghost_backward(net, losses: torch.Tensor, targets: list[torch.Tensor], ledger=None) -> None:
    """opacus' ghost clipping for one chunk: per-example gradient norms by a first backward pass through the
    norm samplers, then the backward pass of sum_i c_i * loss_i with c_i = min(1, C / norm_i) (hooks off),
    which leaves the clipped sum in ``.grad``. As opacus' DPTensorFastGradientClipping.backward, except the
    first pass asks autograd only for what the norm samplers need (``norm_pass_targets``).

    With a ``ledger`` (book-keeping, ``bookkeeping.py``) the norm pass also records each layer's activations
    and output gradients, and the clipped sum is formed from them: no second pass."""
    params = net.trainable_parameters
    for p in params:
        p.__dict__.pop("_norm_sample", None)
    inner = unwrap(net)
    first = [inner.last_input] + targets if inner.last_input is not None else targets
    if ledger is not None:
        ledger.recording = True
    try:
        torch.autograd.grad(losses.sum(), first, retain_graph=ledger is None, allow_unused=True)
    finally:
        if ledger is not None:
            ledger.recording = False
    inner.last_input = None
    missing = [n for n, p in net.named_parameters() if p.requires_grad and not hasattr(p, "_norm_sample")]
    if missing:
        raise RuntimeError(f"ghost clipping: no per-example norm for {missing[0]} (its layer saw no gradient)")
    coef = net.get_clipping_coef().to(losses.device)
    if ledger is not None:
        return ledger.settle(coef)
    net.disable_hooks()
    try:
        (coef * losses).sum().backward()
    finally:
        net.enable_hooks()


def dp_step(net, opt, params, examples, parts, pad_id: int, device, mode: str = "hooks",
            targets: list | None = None, ledger=None) -> list[torch.Tensor]:
    """One logical DP step over its physical chunks: per-example clipping, noise once at the last chunk."""
    losses = []
    if not parts:  # empty Poisson batch: the step still adds noise
        for p in params:
            if mode in NORM_PASS_MODES:
                p.grad = torch.zeros_like(p)
            else:
                p.grad_sample = torch.zeros((0, *p.shape), device=p.device, dtype=p.dtype)
        opt.step()
        opt.zero_grad()
    for j, part in enumerate(parts):
        batch = collate([examples[i] for i in part], pad_id, device)
        with autocast(device):
            ls = per_sample_losses(net, batch)
        if mode in NORM_PASS_MODES:
            ghost_backward(net, ls, targets, ledger)
        else:
            ls.mean().backward()  # opacus 'mean' rescales by the chunk size -> per-example grads
        opt.signal_skip_step(do_skip=j < len(parts) - 1)
        opt.step()
        opt.zero_grad()
        losses.append(ls.detach())
    return losses


def plain_step(net, opt, params, examples, parts, pad_id: int, device, divisor: float,
               clip_norm: float, world_size: int = 1) -> list[torch.Tensor]:
    """One logical non-private step: the summed loss over the public expected batch size, global-norm clipped."""
    losses = []
    for part in parts:
        batch = collate([examples[i] for i in part], pad_id, device)
        with autocast(device):
            ls = per_sample_losses(net, batch)
        (ls.sum() / divisor).backward()
        losses.append(ls.detach())
    if world_size > 1:  # each rank holds its share's sum / the global expected batch: sum over ranks
        for p in params:
            p.grad = torch.zeros_like(p) if p.grad is None else p.grad
            torch.distributed.all_reduce(p.grad)
    torch.nn.utils.clip_grad_norm_(params, clip_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return losses


def world() -> tuple[int, int]:
    """(rank, world size) of the torch.distributed group, (0, 1) without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def step_loss(losses: list[torch.Tensor], world_size: int) -> float:
    """Mean per-example loss of the logical batch (over every rank's share)."""
    flat = torch.cat(losses).float() if losses else torch.zeros(0)
    total = torch.stack([flat.sum(), torch.tensor(float(flat.numel()), device=flat.device)])
    if world_size > 1:
        torch.distributed.all_reduce(total)
    return float(total[0] / total[1]) if total[1] > 0 else float("nan")


def train(model, examples: Sequence[Example], *, steps: int, batch_size: int, physical_batch_size: int, lr: float,
          weight_decay: float, clip_norm: float, seed: int, pad_id: int, dp=None, sample_rate: float | None = None,
          optimizer: str = "adamw", momentum: float = 0.0, checkpoint: Checkpointer | None = None,
          on_step: Callable[[dict], None] | None = None, scheduled: Sequence[Example] = (),
          repetitions: int = 1, population: int | None = None, progress: bool = True) -> TrainResult:
    """Train ``model`` (a CanaryLM already on its device) in place; returns what happened.

    Long because it is the loop's one place where sampling, the DP wrapping, data-parallel sharding,
    checkpoints and the step log meet.

    ``population`` is the size of the candidate pool the rate q = batch_size / population (and the default
    delta) is computed from: every example that could have been drawn in, e.g. text rows plus all canaries,
    members or not, so that q, sigma and delta do not depend on the membership draw the audit randomises.
    None = len(examples).
    Under DP the step log holds the step index only: batch sizes, token counts, losses and step times depend on
    the data outside the accountant (``dp_record``); with ``dp.secure_rng`` the sampler is seeded from OS entropy.
    ``scheduled`` examples (canaries inserted a fixed number of times, non-DP only) join the batches of
    ``repetitions`` steps each on top of the Poisson-sampled ``examples``.
    Under torch.distributed every rank calls this with the same arguments (see the module docstring)."""
    device = next(model.parameters()).device
    rank, world_size = world()
    n = len(examples)
    q = poisson_rate(population or n, batch_size, sample_rate)
    divisor = q * (population or n)  # public: the candidate pool's expected batch, never the drawn pool's
    private_run = dp is not None and dp.enabled
    sampler_seed = secure_seed() if private_run and dp.secure_rng else seed  # never written to an output
    if private_run and dp.secure_rng and world_size > 1:  # every rank draws the same batches: rank 0's entropy
        box = [sampler_seed]
        torch.distributed.broadcast_object_list(box, src=0)
        sampler_seed = box[0]
    rng = np.random.default_rng(sampler_seed)
    if scheduled and private_run:
        raise ConfigError("finetune.canary_insertion: a fixed schedule is not covered by the DP accountant")
    schedule = fixed_schedule(n, len(scheduled), steps, repetitions, seed) if scheduled else {}
    examples = list(examples) + list(scheduled)
    lengths = [len(e) for e in examples]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, optimizer, lr, weight_decay, momentum)
    private = make_private(model, opt, dp, sample_rate=q, steps=steps, population=population or n, seed=seed,
                           optimizer_name=optimizer, device=device, world_size=world_size) if private_run else None
    net, opt = (private.net, private.optimizer) if private else (model, opt)
    if world_size > 1 and not private:  # under DP opacus' DPDDP does this
        for p in params:
            torch.distributed.broadcast(p.data, 0)
    noise, accountant = (private.noise, private.accountant) if private else (None, None)
    mode = private.mode if private else None
    targets = norm_pass_targets(model) if mode in NORM_PASS_MODES else None
    ledger = private.ledger if private else None
    model.keep_input = mode in NORM_PASS_MODES
    state = checkpoint.load() if checkpoint else None
    log, start = restore(state, model, opt, rng, noise, accountant) if state is not None else ([], 0)
    sampler_seed = state.get("sampler_seed", sampler_seed) if state is not None else sampler_seed
    net.train()
    t0 = time.time()
    bar = tqdm(range(start, steps), desc="fine-tune" + (" (DP)" if private else ""), mininterval=5,
               initial=start, total=steps, disable=rank > 0 or not progress)
    try:
        for step in bar:
            ts = time.time()
            idx = np.flatnonzero(rng.random(n) < q)  # Poisson sampling, plus this step's scheduled examples
            idx = np.concatenate([idx, np.asarray(schedule.get(step, []), dtype=np.int64)]) if schedule else idx
            parts = chunks(idx[rank::world_size], lengths, physical_batch_size)
            losses = (dp_step(net, opt, params, examples, parts, pad_id, device, mode, targets, ledger) if private else
                      plain_step(net, opt, params, examples, parts, pad_id, device, divisor, clip_norm, world_size))
            rec = dp_record(step + 1) if private else {
                "step": step + 1, "batch": int(len(idx)), "tokens": int(sum(lengths[i] for i in idx)),
                "loss": step_loss(losses, world_size), "seconds": round(time.time() - ts, 3)}
            log.append(rec)
            if checkpoint and rank == 0 and checkpoint.due(step + 1, steps):
                checkpoint.save({**snapshot(step + 1, log, model, opt, rng, noise, accountant),
                                 "sampler_seed": sampler_seed})
            if on_step:
                on_step(rec)
            if not private:
                bar.set_postfix(loss=f"{rec['loss']:.3f}", batch=len(idx), refresh=False)
    finally:
        model.keep_input = False
    if checkpoint and rank == 0:
        checkpoint.clear()
    return TrainResult(steps=steps, sample_rate=q, expected_batch_size=q * n, n_examples=n,
                       seconds=time.time() - t0, privacy=spent(private) if private else {"dp": False}, log=log,
                       resumed_from=start, inclusions=inclusion_counts(n, q, steps, sampler_seed, schedule, len(examples)))


def mean_nll(model, examples: Sequence[Example], pad_id: int, batch_size: int = 64) -> dict:
    """Token-level mean NLL and perplexity over the labelled positions of ``examples``."""
    if not examples:
        return {"tokens": 0, "nll": None, "perplexity": None}
    lps = token_logprobs(model, examples, pad_id, batch_size)
    tokens = sum(len(x) for x in lps)
    nll = -float(sum(x.sum() for x in lps)) / max(tokens, 1)
    return {"tokens": tokens, "nll": nll, "perplexity": math.exp(nll)}
