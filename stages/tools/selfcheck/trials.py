"""The DP engine audits itself (``leakaudit selfcheck``): gradient canaries trained through the fine-tune's own
DP path, then tested against the specification of the mechanism the accountant accounted.

For each configuration (clipping mode x probe x regime x processes) a probe model (``probe.py``) with m canaries
is trained by ``finetune.loop.train``, the function every DP run goes through: its Poisson sampler,
``finetune.privacy.engine.make_private`` (opacus wrapping, the mode's clipping, the noise generator, the
accountant), the optimizer (DP-SGD, DP-Adam, DP-AdamW), checkpoint and resume and, with 2 processes, torchrun data
parallelism with opacus' distributed optimizer. A seeded coin makes each canary a member (in the training pool) or
not. Canary i's gradient lies in coordinates only it touches, far above the clip norm C, so the specification says
exactly what the optimizer must receive at every step: along each canary's own gradient direction, the privatized
gradient is

    C / B x [i drawn at this step]  +  N(0, (sigma C / B)^2)

with B the public divisor (q x population), sigma and q those the accountant booked, the draws Bin(T, q) per
member and the noise independent across steps. ``Recorder`` observes that gradient where the optimizer opacus
wraps receives it (a step pre-hook: after clipping, noise, scaling and, with 2 processes, the all-reduce), reads
each canary's own gradient direction at the same weights (from a twin of the probe: opacus' hooks are never
disturbed), and keeps every step's whole gradient so the optimizer's update can be replayed from it (DP-Adam(W) is
post-processing of those gradients, nothing more). ``verdict.py`` judges the trials; leakaudit/selfcheck.py
(``leakaudit selfcheck``) runs both.

Beside the specification tests, the one-run f-DP test (Mahloujifar et al.) reads the final model: each canary's
movement along its initial gradient direction, guesses fixed in params, against the accountant's own trade-off
curve (q = 1: mu-GDP, exactly the claim; q < 1: the Poisson-subsampled Gaussian's, stages/shared/bounds/curve.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ...finetune.params import DPParams
from ...finetune.sharding import whole
from ...shared.core.seeds import stream
from .params import SelfcheckParams
from .probe import INIT, build_probe

MODES = ("hooks", "ghost", "bk", "ghost_fsdp")


@dataclass(frozen=True)
class Config:
    mode: str  # hooks | ghost | bk | ghost_fsdp (the probe sharded by FSDP2 across the processes)
    paradigm: str  # probe.PARADIGMS
    processes: int
    probe: str = "linear"  # probe.PROBES
    sample_rate: float = 1.0
    steps: int = 1
    optimizer: str = "sgd"
    resume: bool = False

    @property
    def name(self) -> str:
        regime = f"q{self.sample_rate:g}xT{self.steps}/{self.optimizer}" + ("/resumed" if self.resume else "")
        return f"{self.mode}/{self.probe}:{self.paradigm}/{regime}/{self.processes}p"


@dataclass
class Trial:
    """What one training of the probe left, rank 0's view."""

    scores: np.ndarray  # final movement along each canary's initial gradient direction (the one-run test's score)
    members: np.ndarray  # the coins
    privacy: dict  # the run's privacy record, with the accountant's history (sigma, q, steps) as it booked them
    #: (T, m): each step's privatized gradient along each canary's own gradient direction, in units of C / B
    per_step: np.ndarray
    inclusions: np.ndarray  # (m,): steps whose batch drew each canary (0 for non-members)
    replay_error: float  # max |final weights - the optimizer replayed on the recorded gradients| / max movement
    clip_ratio: float  # the smallest per-example gradient norm seen / C (> 1: every canary was clipped)
    divisor: float  # B


def membership(m: int, seed: int) -> np.ndarray:
    """The seeded coin: canary i is a member with probability 1/2."""
    return stream("finetune.selfcheck.members").numpy(seed).random(m) < 0.5


def gradient_directions(model, chunk: int = 1024) -> dict[str, torch.Tensor]:
    """Each canary's loss gradient in its own coordinates at ``model``'s current weights (one backward pass of
    the summed loss per chunk: canaries' own coordinates are disjoint), keyed like ``own_parameters``."""
    own = model.own_parameters()
    out = {n: torch.zeros_like(p) for n, p in own.items()}
    for start in range(0, model.m, chunk):  # chunked: a Linear (d -> m) output is (chunk, m)
        s = model.own_scores(start, min(start + chunk, model.m))
        grads = torch.autograd.grad(-(model.scale * s).sum(), list(own.values()), allow_unused=True)
        for n, g in zip(own, grads):
            if g is not None:
                out[n] += g
    return out


def _flat(tensors: dict[str, torch.Tensor], m: int) -> torch.Tensor:
    return torch.cat([t.detach().double().reshape(m, -1) for t in tensors.values()], 1)


def along(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Each row of ``x`` (m, k) projected on the unit direction of the same row of ``g``."""
    return (x * g).sum(1) / g.norm(dim=1).clamp(min=1e-300)


def project(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor],
            grads: dict[str, torch.Tensor]) -> np.ndarray:
    """Movement of each canary's own coordinates along minus its gradient's direction (members: positive)."""
    m = len(next(iter(grads.values())))
    return (-along(_flat(after, m) - _flat(before, m), _flat(grads, m))).numpy()


class Recorder:
    """Observes the optimizer opacus wraps as each step begins (a global step pre-hook filtered to it): the
    privatized gradient along each canary's own gradient direction at those weights, and every trainable tensor's
    gradient for the replay. ``twin``: a second probe (same seed, never wrapped) that the live own weights are
    copied into to read the directions of a probe whose gradient direction moves with the weights; None: the
    directions are constant (the linear probe), read once here, before opacus wraps ``model``. ``initial``: the
    directions at the initial weights (the one-run test's score reads the movement along them).

    A sharded probe (ghost_fsdp) is recorded on every rank: its gradients and weights are gathered whole
    (``sharding.whole``, a collective)."""

    def __init__(self, model, twin, clip: float, divisor: float):
        self.model, self.twin, self.clip, self.divisor = model, twin, clip, divisor
        self.per_step: list[np.ndarray] = []
        self.grads: list[list[torch.Tensor]] = []
        self.clip_ratio = math.inf
        self.initial = gradient_directions(model) if twin is None else None

    def directions(self) -> dict[str, torch.Tensor]:
        if self.twin is None:
            return self.initial
        with torch.no_grad():
            live = self.model.own_parameters()
            for n, p in self.twin.own_parameters().items():
                p.copy_(whole(live[n]))
        dirs = gradient_directions(self.twin)
        self.initial = dirs if self.initial is None else self.initial
        return dirs

    def hook(self, opt, args, kwargs) -> None:
        if type(opt).__module__.startswith("opacus"):
            return
        params = [p for g in opt.param_groups for p in g["params"]]
        trainable = self.trainable
        if len(params) != len(trainable) or any(a is not b for a, b in zip(params, trainable)):
            return  # another optimizer's step
        own = self.model.own_parameters()
        g = _flat(self.directions(), self.model.m)
        self.clip_ratio = min(self.clip_ratio, float(g.norm(dim=1).min()) / self.clip)
        received = _flat({n: whole(p.grad) for n, p in own.items()}, self.model.m)
        self.per_step.append((along(received, g) / (self.clip / self.divisor)).numpy())
        self.grads.append([whole(p.grad).detach().clone() for p in params])

    @property
    def trainable(self) -> list:
        """The model's trainable tensors as they are now (the shards, once FSDP has sharded it)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def __enter__(self) -> "Recorder":
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self.handle = register_optimizer_step_pre_hook(self.hook)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()


def replay(initial: list[torch.Tensor], grads: list[list[torch.Tensor]], optimizer: str, lr: float) -> list:
    """The optimizer (torch's, as ``loop.make_optimizer`` builds it) run from ``initial`` on the recorded
    privatized gradients: what a DP-SGD / DP-Adam(W) update is, given them."""
    from ...finetune.loop import make_optimizer

    params = [torch.nn.Parameter(t.clone()) for t in initial]
    opt = make_optimizer(params, optimizer, lr, 0.0)
    for step in grads:
        for p, g in zip(params, step):
            p.grad = g.clone()
        opt.step()
    return [p.detach() for p in params]


def dp_config(sc: SelfcheckParams, mode: str, unit: str = "example") -> DPParams:
    return DPParams(enabled=True, epsilon=sc.epsilon, delta=sc.delta, max_grad_norm=sc.max_grad_norm,
                    accountant=sc.accountant, grad_sample_mode=mode, secure_rng=False, unit=unit,
                    rows_per_user=sc.rows_per_user)


def user_pool(examples: list, members: np.ndarray, rows: int) -> tuple[list, list[int]]:
    """The user-level configuration's pool (paradigm ``users``): each member canary a user holding ``rows`` copies
    of its example (each row's gradient its own direction: a user's summed gradient is ``rows`` x it, far above C),
    and the user (canary index) of every row."""
    idx = [i for i in np.flatnonzero(members) for _ in range(rows)]
    return [examples[i] for i in idx], [int(i) for i in idx]


def canaries_of(sc: SelfcheckParams, config: Config) -> int:
    return sc.transformer_canaries if config.probe == "transformer" else sc.canaries


def train_probe(sc: SelfcheckParams, config: Config, seed: int) -> Trial | None:
    """Train the probe once through ``finetune.loop.train`` (in this process; under torchrun, this rank's share) and
    record it (rank 0 only; other ranks return None). A resumed configuration is stopped after its checkpoint at
    half the steps and continued in a new probe from that checkpoint."""
    from ...finetune.checkpoint import Checkpointer
    from ...finetune.loop import TrainConfig, train, world
    from ...finetune.privacy.engine import public_divisor

    m = canaries_of(sc, config)

    per_user = config.paradigm == "users"

    def probe():
        torch.manual_seed(INIT.int_seed(seed))  # the weights' stream; the canary directions draw from their own
        return build_probe(config.probe, m, "rows" if per_user else config.paradigm, width=sc.width,
                           scale=sc.gradient_scale, seed=seed)

    model = probe()
    members = membership(m, seed)
    pool, users = [e for e, y in zip(model.examples(), members) if y], None
    if per_user:  # one more row per user than a step may train on: the cap is exercised
        pool, users = user_pool(model.examples(), members, sc.rows_per_user + 1)
    rank = world()[0]
    divisor = public_divisor(config.sample_rate, m)
    sharded = config.mode == "ghost_fsdp"
    # rank 0 records (its model is the one scored); the other ranks only train their share, or, sharded, take part
    # in gathering the shards
    recorder = Recorder(model, None if config.probe == "linear" else probe(), sc.max_grad_norm,
                        divisor) if rank == 0 or sharded else None
    initial = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    stop = config.steps // 2 if config.resume else None

    def stop_at(rec):
        if rec["step"] == stop:
            raise _Stopped

    with tempfile.TemporaryDirectory() as tmp, (recorder or contextlib.nullcontext()):
        ck = Checkpointer(Path(tmp) / "probe.pt", every=stop, fingerprint="selfcheck") if stop else None
        cfg = TrainConfig(
            steps=config.steps, batch_size=1, physical_batch_size=sc.physical_batch_size, lr=sc.lr,
            weight_decay=0.0, clip_norm=sc.max_grad_norm, seed=seed, pad_id=0,
            dp=dp_config(sc, config.mode, "user" if per_user else "example"), users=users,
            user_population=m if per_user else None,
            sample_rate=config.sample_rate, optimizer=config.optimizer, population=m, progress=False,
            checkpoint=ck, on_step=stop_at if stop else None, sharding="fsdp" if sharded else "ddp")
        try:
            result = train(model, pool, cfg)
        except _Stopped:  # the run is killed after its checkpoint; a new probe resumes it
            model = probe()
            if recorder:
                recorder.model = model
            result = train(model, pool, dataclasses.replace(cfg, on_step=None))
            assert result.resumed_from == stop, "the resumed run did not start from its checkpoint"
    if recorder is None:
        return None
    own = {n: whole(p) for n, p in model.own_parameters().items()}
    final = [whole(p).detach() for p in recorder.trainable]
    if rank != 0:  # a sharded run's other ranks took part in the gathers
        return None
    return _trial(sc, config, recorder, initial, own, final, members, result, divisor)


def _trial(sc: SelfcheckParams, config: Config, recorder: Recorder, initial: dict, own: dict, final: list,
           members: np.ndarray, result, divisor: float) -> Trial:
    """What the probe's training left (rank 0): the optimizer replayed against the final weights, the privacy
    record as booked, the inclusion counts and the one-run test's scores."""
    replayed = replay(list(initial.values()), recorder.grads, config.optimizer, sc.lr)
    moved = max(float((f - i).abs().max()) for f, i in zip(final, initial.values()))
    error = max(float((f - r).abs().max()) for f, r in zip(final, replayed)) / max(moved, 1e-30)
    keys = ("epsilon_spent", "delta", "noise_multiplier", "sample_rate", "steps", "grad_sample_mode", "world_size",
            "accountant", "max_grad_norm", "optimizer", "accountant_history")
    privacy = {k: getattr(result.privacy, k) for k in keys}
    counts = np.zeros(len(members), dtype=np.int64)
    if result.user_inclusions is not None:  # user level: the steps that drew each member user
        counts[np.flatnonzero(members)] = [result.user_inclusions[int(i)] for i in np.flatnonzero(members)]
    else:
        counts[members] = result.inclusions
    score = project({n: initial[n] for n in own}, {n: p.detach() for n, p in own.items()}, recorder.initial)
    return Trial(score, members, privacy, np.array(recorder.per_step), counts, error, recorder.clip_ratio, divisor)


class _Stopped(Exception):
    """The resumed configuration's kill after its checkpoint."""


# ---------------------------------------------------------------------------------------------- processes
def worker(argv: Sequence[str]) -> None:
    """One torchrun rank: ``python -m stages.tools.selfcheck.trials <spec.json> <out.npz>`` (rank 0 writes)."""
    from ...finetune.distributed import finish, init
    from ...shared.core.cli import configure_process

    configure_process()
    quiet_q1()
    spec = json.loads(Path(argv[0]).read_text())
    sc = SelfcheckParams.from_json(spec["params"])
    torch.set_num_threads(1)
    init("cpu")
    try:
        trial = train_probe(sc, Config(**spec["config"]), spec["seed"])
    finally:
        finish()
    if trial is not None:
        np.savez(argv[1], scores=trial.scores, members=trial.members, privacy=json.dumps(trial.privacy),
                 per_step=trial.per_step, inclusions=trial.inclusions,
                 facts=json.dumps({"replay_error": trial.replay_error, "clip_ratio": trial.clip_ratio,
                                   "divisor": trial.divisor}))


def run_trial(sc: SelfcheckParams, config: Config, seed: int, module: str = "stages.tools.selfcheck.trials") -> Trial:
    """``train_probe`` in this process, or in ``config.processes`` torchrun processes running ``module``
    (a test passes a module that breaks the engine first, then calls ``worker``)."""
    if config.processes == 1:
        return train_probe(sc, config, seed)
    from ...finetune.distributed import launch

    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "trial.npz"
        spec.write_text(json.dumps({"params": sc.to_json(), "config": dataclasses.asdict(config), "seed": seed}))
        launch([str(spec), str(out)], config.processes, module=module)
        data = np.load(out)
        return Trial(data["scores"], data["members"], json.loads(str(data["privacy"])), data["per_step"],
                     data["inclusions"], **json.loads(str(data["facts"])))


def quiet_q1() -> None:
    """opacus' PRV accountant at q = 1 takes log(1 - q) = -inf inside a where(): numpy warns, the result is right."""
    import warnings

    warnings.filterwarnings("ignore", message="divide by zero encountered in log", module="opacus")


def configs_of(sc: SelfcheckParams) -> list[Config]:
    return [Config(**dataclasses.asdict(c)) for c in sc.configs]



if __name__ == "__main__":  # a torchrun rank of run_trial
    worker(sys.argv[1:])
