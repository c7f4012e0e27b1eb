"""The DP engine audits itself (``leakaudit selfcheck``): gradient canaries trained through the fine-tune's own
DP path, and a one-run audit of what they reveal against what the accountant says was spent.

For each configuration (clipping mode x paradigm x processes) the probe model (``probe.py``) with m canaries
is trained by ``loop.train``, the function every DP run goes through: its Poisson sampler,
``privacy.engine.make_private``
(opacus wrapping, the mode's clipping, the noise generator, the accountant), DP-SGD and, with 2 processes,
torchrun data parallelism with opacus' distributed optimizer. A seeded coin makes each canary a member (in the
training pool) or not. Canary i's gradient is a constant vector in coordinates only it touches, far above
the clip norm, so a correct engine moves those coordinates by exactly the clipped gradient per inclusion plus
N(0, (sigma C)^2) noise per coordinate. The statistic is that movement projected on the gradient's direction.

This module is the training side (a ``Trial`` per configuration); stages/audit/selfcheck.py judges the trials
and flows/selfcheck.py (``leakaudit selfcheck``) runs both.

Design (``selfcheck`` in params.yaml, fixed before any run): q = 1 and T = 1, where DP-SGD is the Gaussian
mechanism and the accountant's whole curve is that of mu = 1/sigma-GDP, so the f-DP one-run test (audit/gdp.py)
of "the engine is the mechanism its accountant accounted" assumes nothing beyond the claim under test.
Guess "in" for the ``guesses_in`` highest scores and "out" for the ``guesses_out`` lowest. A configuration
is flagged when that test rejects the accountant's claim at 1 - alpha / K (K = configurations checked,
Bonferroni): the GDP epsilon lower bound at that confidence exceeds the accountant's epsilon. The Steinke
et al. (assumption-free) bound is reported too; it degrades with m * delta. ``ideal`` is the GDP bound at
95% that exact Gaussian scores of a correct engine give at the median count (seeded simulation).

With SGD at a constant learning rate the final model's movement is the sum of the per-step movements, so the
final-model and all-iterates threat models read the same statistic here.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..core.seeds import stream
from ..lm.examples import IGNORE, Example
from .params import DPParams, SelfcheckParams
from .probe import ProbeLM

MODES = ("hooks", "ghost", "bk")


@dataclass(frozen=True)
class Config:
    mode: str  # hooks | ghost | bk
    paradigm: str  # probe.PARADIGMS
    processes: int

    @property
    def name(self) -> str:
        return f"{self.mode}/{self.paradigm}/{self.processes}p"


@dataclass
class Trial:
    """What one training of the probe left: canary scores, who was in, the accountant's record."""

    scores: np.ndarray
    members: np.ndarray
    privacy: dict


def membership(m: int, seed: int) -> np.ndarray:
    """The seeded coin: canary i is a member with probability 1/2."""
    return stream("finetune.selfcheck.members").numpy(seed).random(m) < 0.5


def examples(m: int) -> list[Example]:
    """Canary i: the input token i, one labelled position."""
    return [Example(np.array([i, 0], dtype=np.int64), np.array([IGNORE, 0], dtype=np.int64), "canary:probe")
            for i in range(m)]


def gradient_directions(model: ProbeLM, chunk: int = 1024) -> dict[str, torch.Tensor]:
    """Each canary's loss gradient in its own coordinates at ``model``'s current weights (one backward pass of
    the summed loss: canaries' own coordinates are disjoint), keyed like ``own_parameters``."""
    own = model.own_parameters()
    out = {n: torch.zeros_like(p) for n, p in own.items()}
    for start in range(0, model.m, chunk):  # chunked: a Linear (d -> m) output is (chunk, m)
        s, _ = model(torch.arange(start, min(start + chunk, model.m)).unsqueeze(1))
        grads = torch.autograd.grad(-(model.scale * s).sum(), list(own.values()), allow_unused=True)
        for n, g in zip(own, grads):
            if g is not None:
                out[n] += g
    return out


def project(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor],
            grads: dict[str, torch.Tensor]) -> np.ndarray:
    """Movement of each canary's own coordinates along minus its gradient's direction (members: positive)."""
    dot = torch.zeros(len(next(iter(grads.values()))), dtype=torch.float64)
    norm2 = torch.zeros_like(dot)
    for n, g in grads.items():
        g = g.double().reshape(len(g), -1)
        moved = (after[n] - before[n]).double().reshape(len(g), -1)
        dot -= (moved * g).sum(1)
        norm2 += (g * g).sum(1)
    return (dot / norm2.clamp(min=1e-300).sqrt()).numpy()


def dp_config(sc: SelfcheckParams, mode: str) -> DPParams:
    return DPParams(enabled=True, epsilon=sc.epsilon, delta=sc.delta, max_grad_norm=sc.max_grad_norm,
                    accountant=sc.accountant, grad_sample_mode=mode, secure_rng=False)


def train_probe(sc: SelfcheckParams, config: Config, seed: int) -> Trial | None:
    """Train the probe once through ``loop.train`` (in this process; under torchrun, this rank's share) and
    score the canaries (rank 0 only; other ranks return None)."""
    from .loop import TrainConfig, train, world

    torch.manual_seed(seed)
    model = ProbeLM(sc.canaries, config.paradigm, d=sc.width, scale=sc.gradient_scale, seed=seed)
    members = membership(sc.canaries, seed)
    pool = [e for e, y in zip(examples(sc.canaries), members) if y]
    grads = gradient_directions(model)
    before = {n: p.detach().clone() for n, p in model.own_parameters().items()}
    result = train(model, pool, TrainConfig(
        steps=sc.steps, batch_size=1, physical_batch_size=sc.physical_batch_size, lr=sc.lr, weight_decay=0.0,
        clip_norm=sc.max_grad_norm, seed=seed, pad_id=0, dp=dp_config(sc, config.mode), sample_rate=sc.sample_rate,
        optimizer="sgd", population=sc.canaries, progress=False))
    if world()[0] != 0:
        return None
    after = {n: p.detach().clone() for n, p in model.own_parameters().items()}
    privacy = {k: result.privacy[k] for k in ("epsilon_spent", "delta", "noise_multiplier", "sample_rate", "steps",
                                              "grad_sample_mode", "world_size", "accountant")}
    return Trial(project(before, after, grads), members, privacy)


# ---------------------------------------------------------------------------------------------- processes
def worker(argv: Sequence[str]) -> None:
    """One torchrun rank: ``python -m stages.finetune.selfcheck <spec.json> <out.npz>`` (rank 0 writes)."""
    from ..core.cli import configure_process
    from .distributed import finish, init

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
        np.savez(argv[1], scores=trial.scores, members=trial.members, privacy=json.dumps(trial.privacy))


def run_trial(sc: SelfcheckParams, config: Config, seed: int, module: str = "stages.finetune.selfcheck") -> Trial:
    """``train_probe`` in this process, or in ``config.processes`` torchrun processes running ``module``
    (a test passes a module that breaks the engine first, then calls ``worker``)."""
    if config.processes == 1:
        return train_probe(sc, config, seed)
    from .distributed import launch

    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "trial.npz"
        spec.write_text(json.dumps({"params": sc.to_json(), "config": dataclasses.asdict(config), "seed": seed}))
        launch([str(spec), str(out)], config.processes, module=module)
        data = np.load(out)
        return Trial(data["scores"], data["members"], json.loads(str(data["privacy"])))


def quiet_q1() -> None:
    """opacus' PRV accountant at q = 1 takes log(1 - q) = -inf inside a where(): numpy warns, the result is right."""
    import warnings

    warnings.filterwarnings("ignore", message="divide by zero encountered in log", module="opacus")


def configs_of(sc: SelfcheckParams) -> list[Config]:
    return [Config(c.mode, c.paradigm, c.processes) for c in sc.configs]



if __name__ == "__main__":  # a torchrun rank of run_trial
    worker(sys.argv[1:])
