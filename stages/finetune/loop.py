"""The fine-tuning loop: Poisson-sampled logical batches, length-bucketed physical chunks, and
either non-private AdamW (averaged-gradient clipping) or opacus DP-SGD/DP-Adam.

Sampling (``sampling.py``): at every step each training example is included independently with probability
q = batch_size / population (Poisson sampling, as the DP accountant assumes), from a seeded generator; the
population is the fixed candidate pool (every canary, member or not: ``inputs.Inputs.population``), so q is public. The
same sampler is used without DP, so DP and non-DP runs differ only in clipping and noise.

DP (``privacy/``, the engine: ``privacy/engine.py``): the model is wrapped by opacus for per-example clipping, the
optimizer in opacus'
DPOptimizer and its accountant (PRV or RDP) is stepped by the optimizer's hook once per logical step with
sample rate q. A logical batch is processed in chunks (opacus' virtual steps, ``signal_skip_step``);
clipping is per example, noise is added once per logical step, and the sum is divided by the expected
batch size q * population of the fixed candidate pool (a public constant; ``engine.public_divisor``). Three ways
to clip (``finetune.dp.grad_sample_mode``), registered clipping strategies (``privacy/strategies.py``): ``hooks``
(opacus' per-example gradients), ``ghost`` (opacus' ghost clipping: per-example norms, then the loss weighted by
the clipping factors is backpropagated) and ``bk`` (book-keeping: the clipped sum from the norm pass's records,
no second pass).

Data-parallel (``world_size`` > 1, under torchrun): every rank draws the same Poisson batch from the same
seeded generator and trains its share (every world_size-th sampled example), so the logical batch is the
single-process one; gradients are summed over ranks (opacus' distributed optimizers under DP: noise added
by rank 0 only). Sharded (``sharding`` "fsdp", ``sharding.py``): the model is split across the ranks by FSDP2 and
clipped by opacus' ghost_fsdp; every rank runs the same number of chunks per step and adds its shard's part of
the same noise draw; checkpoints are sharded (torch.distributed.checkpoint) and the weights are gathered at the end.

User-level DP (``finetune.dp.unit: user``): the units are the users of the pool (``TrainConfig.users``): each step
draws each user with probability q = batch_size / the candidate pool's users and up to ``dp.rows_per_user`` of a
sampled user's rows (``sampling.user_batch``); a user's rows share one chunk (``user_chunks``), where their
per-example gradients are summed by user before clipping (``privacy/strategies.py``: hooks), so each sampled user's
whole contribution is clipped to C as one unit; the noise (once per step) and the divisor (q x the candidate pool's
users) are as before, and the accountant books the user rate q. Neighbouring datasets differ in all rows of one user.

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

from ..shared.core.errors import ConfigError
from ..shared.lm.batching import chunks, collate
from ..shared.lm.examples import Example
from ..shared.lm.scoring import autocast, token_logprobs
from . import sharding
from .checkpoint import Checkpointer, restore, snapshot
from .loss import per_sample_losses
from .params import DPParams, FinetuneParams
from .privacy.engine import Private, dp_step, make_private, spent
from .sampling import UserSampler, fixed_schedule, poisson_draw, poisson_rate, sampler_seed, user_chunks
from .schema import PrivacyRecord, no_dp_record


@dataclass
class TrainResult:
    steps: int
    sample_rate: float
    expected_drawn_batch: float  # q x n: the private expected batch (the noise divisor is public: q x population)
    n_examples: int
    seconds: float
    privacy: PrivacyRecord | None = None  # the run's privacy record (schema.PrivacyRecord)
    log: list = field(default_factory=list)
    resumed_from: int = 0
    #: steps that sampled each example (the pool, then the scheduled ones), counted as the batches were drawn
    #: (a seeded run's equal ``sampling.inclusion_counts``' replay); an auditor-side record, never published
    inclusions: np.ndarray | None = None
    #: a sharded run's trained weights, whole, on rank 0 (``sharding.gather``; the model itself stays sharded)
    gathered: dict | None = None
    #: user-level DP: steps that sampled each user of the pool (user -> count); an auditor-side record
    user_inclusions: dict | None = None


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


@dataclass(frozen=True)
class TrainConfig:
    """What ``train`` does with a pool: the recipe (``FinetuneParams``) and the run's facts (``TrainConfig.of``)."""

    steps: int
    batch_size: int
    physical_batch_size: int
    lr: float
    weight_decay: float
    clip_norm: float
    seed: int
    pad_id: int
    dp: DPParams | None = None  # None or disabled: non-private AdamW/SGD with global-norm clipping
    sample_rate: float | None = None  # q; None = batch_size / population
    optimizer: str = "adamw"
    momentum: float = 0.0
    #: canaries inserted a fixed number of times (non-DP only): each joins the batches of ``repetitions`` steps
    #: on top of the Poisson-sampled pool
    scheduled: tuple[Example, ...] = ()
    repetitions: int = 1
    #: ddp (or a single process) | fsdp: the model sharded across the torch.distributed ranks (DP only)
    sharding: str = "ddp"
    #: the candidate pool q (and the default delta) is computed from: every example that could have been drawn
    #: in, e.g. text rows plus all canaries, members or not, so that q, sigma and delta do not depend on the
    #: membership draw the audit randomises. None = the pool trained on
    population: int | None = None
    #: user-level DP (dp.unit: user): the user of each pool example, in pool order (a user's rows are one unit)
    users: tuple | None = None
    #: user-level DP: the candidate pool's users (every user that could have been drawn in, e.g. each canary, member
    #: or not, its own user): q = batch_size / it and the divisor q x it. None = the pool's users
    user_population: int | None = None
    checkpoint: Checkpointer | None = None
    on_step: Callable[[dict], None] | None = None  # called with each step's log record
    progress: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "scheduled", tuple(self.scheduled))
        if self.users is not None:
            object.__setattr__(self, "users", tuple(self.users))

    @property
    def private(self) -> bool:
        return self.dp is not None and self.dp.enabled

    @property
    def per_user(self) -> bool:
        """User-level DP (``dp.unit: user``)."""
        return self.private and self.dp.unit == "user"

    @classmethod
    def of(cls, ft: FinetuneParams, *, pad_id: int, population: int, scheduled: Sequence[Example] = (),
           checkpoint: Checkpointer | None = None, users: Sequence | None = None,
           user_population: int | None = None) -> "TrainConfig":
        """A pipeline run's config: ``ft``'s recipe plus the tokenizer's pad id, the candidate pool's size, the
        canaries on a fixed schedule, the run's checkpointer and, under user-level DP, the pool's users and the
        candidate pool's user count."""
        return cls(steps=ft.steps, batch_size=ft.batch_size, physical_batch_size=ft.physical_batch_size, lr=ft.lr,
                   weight_decay=ft.weight_decay, clip_norm=ft.clip_norm, seed=ft.seed, pad_id=pad_id, dp=ft.dp,
                   sample_rate=ft.sample_rate, optimizer=ft.optimizer, momentum=ft.momentum, scheduled=scheduled,
                   repetitions=ft.canary_repetitions, population=population, checkpoint=checkpoint,
                   sharding=ft.distributed.strategy, users=users, user_population=user_population)


@dataclass
class Session:
    """One ``train`` call's working state: the sampler, the (wrapped) model and optimizer, the step log."""

    config: TrainConfig
    model: object  # the CanaryLM (checkpoints hold its parameters)
    net: object  # what runs forward: the model, or opacus' wrapper of it
    opt: object
    params: list
    private: Private | None
    examples: list  # the pool, then the scheduled examples
    n: int  # the pool's size
    q: float
    divisor: float  # non-DP: the public expected batch q * population the summed loss is divided by
    rng: np.random.Generator
    schedule: dict
    device: object
    rank: int
    world_size: int
    log: list = field(default_factory=list)
    start: int = 0
    #: steps that drew each example so far (checkpointed with the sampler's state; no seed is kept)
    counts: np.ndarray | None = None
    users: UserSampler | None = None  # user-level DP: the users' rows, row draw and counts

    @property
    def sharded(self) -> bool:
        """The model is sharded across the ranks (FSDP): collectives in every chunk, sharded checkpoints."""
        return self.private is not None and self.private.strategy.sharded

    @property
    def lengths(self) -> list[int]:
        return [len(e) for e in self.examples]


def accounted_population(config: TrainConfig, n: int) -> int:
    """What q, the divisor and the default delta count: the candidate pool's examples, or under user-level DP its
    users (``n``: the pool's size, the default)."""
    if config.per_user:
        return config.user_population or len(set(config.users))
    return config.population or n


def sampler(config: TrainConfig, n: int, world_size: int) -> tuple[float, float, np.random.Generator, dict]:
    """(q, divisor, sampler, fixed schedule) of a run over a pool of ``n``. With ``dp.secure_rng`` the sampler is
    seeded from OS entropy (rank 0's, broadcast: every rank draws the same batches); the seed is kept nowhere."""
    population = accounted_population(config, n)
    q = poisson_rate(population, config.batch_size, config.sample_rate)
    seed = sampler_seed(config.private and config.dp.secure_rng, config.seed, world_size)
    rng = np.random.default_rng(seed)
    del seed  # a secure seed is never written anywhere (the checkpoint holds the sampler's state, not its seed)
    if config.scheduled and config.private:
        raise ConfigError("finetune.canary_insertion: a fixed schedule is not covered by the DP accountant")
    schedule = (fixed_schedule(n, len(config.scheduled), config.steps, config.repetitions, config.seed)
                if config.scheduled else {})
    return q, q * population, rng, schedule  # divisor: the candidate pool's, never the drawn pool's


def start_session(model, examples: Sequence[Example], config: TrainConfig) -> Session:
    """Sampler, optimizer and (under DP) opacus' wrapping of ``model``; data-parallel ranks start equal."""
    device = next(model.parameters()).device
    rank, world_size = world()
    n = len(examples)
    users = UserSampler.of(config.users, n, world_size, config.dp.secure_rng, config.seed) if config.per_user else None
    q, divisor, rng, schedule = sampler(config, n, world_size)
    pool = list(examples) + list(config.scheduled)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, config.optimizer, config.lr, config.weight_decay, config.momentum)
    if config.sharding == "fsdp" and not config.private:
        raise ConfigError("finetune.distributed.strategy: fsdp is built for DP runs: needs dp.enabled: true")
    sharded = config.sharding == "fsdp" and world_size > 1
    private = make_private(model, opt, config.dp, sample_rate=q, steps=config.steps,
                           population=accounted_population(config, n),
                           seed=config.seed, optimizer_name=config.optimizer, device=device,
                           world_size=world_size, sharded=sharded) if config.private else None
    net, opt = (private.net, private.optimizer) if private else (model, opt)
    if sharded:  # the parameters are the shards now
        params = [p for p in model.parameters() if p.requires_grad]
    if world_size > 1 and not private:  # under DP opacus' DPDDP does this
        for p in params:
            torch.distributed.broadcast(p.data, 0)
    model.keep_input = private is not None and private.strategy.norm_pass
    return Session(config, model, net, opt, params, private, pool, n, q, divisor, rng, schedule, device, rank,
                   world_size, counts=np.zeros(len(pool), dtype=np.int64), users=users)


def noise_and_accountant(s: Session) -> tuple:
    return (s.private.noise, s.private.accountant) if s.private else (None, None)


def resume(s: Session) -> None:
    """Continue from the run's checkpoint, where there is one for these inputs."""
    ck = s.config.checkpoint
    if ck is None:
        return
    if s.sharded:
        state = sharding.load_checkpoint(ck.path, s.model, s.opt.original_optimizer, ck.fingerprint)
        model = None  # the shards are in place
    else:
        state, model = ck.load(), s.model
    if state is not None:
        s.log, s.start = restore(state, model, s.opt, s.rng, *noise_and_accountant(s))
        s.counts = np.asarray(state["inclusions"], dtype=np.int64).copy()
        if s.users is not None:
            s.users.restore(state)


def save(s: Session, step: int) -> None:
    """Checkpoint after ``step`` steps: rank 0 alone (each rank holds the whole model), or every rank its shards."""
    ck = s.config.checkpoint
    if s.sharded:
        meta = {**snapshot(step, s.log, None, s.opt, s.rng, *noise_and_accountant(s)), "inclusions": s.counts.copy(),
                "fingerprint": ck.fingerprint, **(s.users.state() if s.users else {})}
        sharding.save_checkpoint(ck.path, s.model, s.opt.original_optimizer, meta)
    elif s.rank == 0:
        ck.save({**snapshot(step, s.log, s.model, s.opt, s.rng, *noise_and_accountant(s)),
                 "inclusions": s.counts.copy(), **(s.users.state() if s.users else {})})


def run_step(s: Session, step: int, lengths: list[int]) -> dict:
    """Draw step ``step``'s Poisson batch (plus its scheduled examples), train on this rank's share; its log record.
    Under DP the record holds the step index only (``dp_record``)."""
    c = s.config
    if s.users is not None:
        return run_user_step(s, step)
    ts = time.time()
    idx = np.flatnonzero(poisson_draw(s.rng, s.n, s.q))  # Poisson sampling, plus this step's scheduled examples
    idx = np.concatenate([idx, np.asarray(s.schedule.get(step, []), dtype=np.int64)]) if s.schedule else idx
    s.counts[idx] += 1  # idx holds no repeats: a Poisson draw and this step's scheduled examples
    parts = chunks(idx[s.rank::s.world_size], lengths, c.physical_batch_size)
    if s.private:
        pad_to = sharding.chunk_count(len(parts)) if s.sharded else None
        dp_step(s.private, s.params, s.examples, parts, c.pad_id, s.device, pad_to)
        return dp_record(step + 1)
    losses = plain_step(s.net, s.opt, s.params, s.examples, parts, c.pad_id, s.device, s.divisor, c.clip_norm,
                        s.world_size)
    return {"step": step + 1, "batch": int(len(idx)), "tokens": int(sum(lengths[i] for i in idx)),
            "loss": step_loss(losses, s.world_size), "seconds": round(time.time() - ts, 3)}


def run_user_step(s: Session, step: int) -> dict:
    """A user-level DP step: Poisson over the users, up to ``dp.rows_per_user`` rows of each sampled one, the rows of
    a user summed before clipping (``dp_step``'s ``units``)."""
    c = s.config
    groups = s.users.draw(s.rng, s.q, c.dp.rows_per_user)
    for rows in groups:
        s.counts[rows] += 1
    parts, units = user_chunks(groups, c.physical_batch_size)
    dp_step(s.private, s.params, s.examples, parts, c.pad_id, s.device, units=units)
    return dp_record(step + 1)


def run_steps(s: Session) -> None:
    """The steps from ``s.start`` on, each logged, checkpointed when due and reported to ``on_step``."""
    c = s.config
    lengths = s.lengths
    bar = tqdm(range(s.start, c.steps), desc="fine-tune" + (" (DP)" if s.private else ""), mininterval=5,
               initial=s.start, total=c.steps, disable=s.rank > 0 or not c.progress)
    for step in bar:
        rec = run_step(s, step, lengths)
        s.log.append(rec)
        if c.checkpoint and c.checkpoint.due(step + 1, c.steps):
            save(s, step + 1)
        if c.on_step:
            c.on_step(rec)
        if not s.private:
            bar.set_postfix(loss=f"{rec['loss']:.3f}", batch=rec["batch"], refresh=False)


def train(model, examples: Sequence[Example], config: TrainConfig) -> TrainResult:
    """Train ``model`` (a CanaryLM already on its device) in place on the Poisson-sampled pool ``examples``;
    returns what happened. Under torch.distributed every rank calls this with the same arguments (see the module
    docstring)."""
    s = start_session(model, examples, config)
    try:
        resume(s)
        s.net.train()
        t0 = time.time()
        run_steps(s)
    finally:
        model.keep_input = False
    seconds = time.time() - t0
    gathered = sharding.gather(model) if s.sharded else None
    if config.checkpoint and s.rank == 0:
        config.checkpoint.clear()
    units = None if s.users is None else dict(zip(dict.fromkeys(config.users), s.users.counts.tolist()))
    return TrainResult(steps=config.steps, sample_rate=s.q,
                       expected_drawn_batch=s.q * (s.n if units is None else len(units)), n_examples=s.n,
                       seconds=seconds, privacy=spent(s.private) if s.private else no_dp_record(s.q, config.steps),
                       log=s.log, resumed_from=s.start, inclusions=s.counts, gathered=gathered, user_inclusions=units)


def mean_nll(model, examples: Sequence[Example], pad_id: int, batch_size: int = 64) -> dict:
    """Token-level mean NLL and perplexity over the labelled positions of ``examples``."""
    if not examples:
        return {"tokens": 0, "nll": None, "perplexity": None}
    lps = token_logprobs(model, examples, pad_id, batch_size)
    tokens = sum(len(x) for x in lps)
    nll = -float(sum(x.sum() for x in lps)) / max(tokens, 1)
    return {"tokens": tokens, "nll": nll, "perplexity": math.exp(nll)}
