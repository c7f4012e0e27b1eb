"""The DP engine audits itself (``leakaudit selfcheck``): gradient canaries trained through the fine-tune's own
DP path, and a one-run audit of what they reveal against what the accountant says was spent.

For each configuration (clipping mode x paradigm x processes) the probe model (``probe.py``) with m canaries
is trained by ``loop.train``, the function every DP run goes through: its Poisson sampler, ``dp.make_private``
(opacus wrapping, the mode's clipping, the noise generator, the accountant), DP-SGD and, with 2 processes,
torchrun data parallelism with opacus' distributed optimizer. A seeded coin makes each canary a member (in the
training pool) or not. Canary i's gradient is a constant vector in coordinates only it touches, far above
the clip norm, so a correct engine moves those coordinates by exactly the clipped gradient per inclusion plus
N(0, (sigma C)^2) noise per coordinate. The statistic is that movement projected on the gradient's direction.

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

from ..lm.examples import IGNORE, Example
from .params import DPParams, SelfcheckParams
from .probe import ProbeLM

SELFCHECK_VERSION = 1
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
    return np.random.default_rng([seed, 1]).random(m) < 0.5


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


def project(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], grads: dict[str, torch.Tensor]) -> np.ndarray:
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
    from .loop import train, world

    torch.manual_seed(seed)
    model = ProbeLM(sc.canaries, config.paradigm, d=sc.width, scale=sc.gradient_scale, seed=seed)
    members = membership(sc.canaries, seed)
    pool = [e for e, y in zip(examples(sc.canaries), members) if y]
    grads = gradient_directions(model)
    before = {n: p.detach().clone() for n, p in model.own_parameters().items()}
    result = train(model, pool, steps=sc.steps, batch_size=1, physical_batch_size=sc.physical_batch_size,
                   lr=sc.lr, weight_decay=0.0, clip_norm=sc.max_grad_norm, seed=seed, pad_id=0,
                   dp=dp_config(sc, config.mode), sample_rate=sc.sample_rate, optimizer="sgd",
                   population=sc.canaries, progress=False)
    if world()[0] != 0:
        return None
    after = {n: p.detach().clone() for n, p in model.own_parameters().items()}
    privacy = {k: result.privacy[k] for k in ("epsilon_spent", "delta", "noise_multiplier", "sample_rate", "steps",
                                              "grad_sample_mode", "world_size", "accountant")}
    return Trial(project(before, after, grads), members, privacy)


# ---------------------------------------------------------------------------------------------- processes
def worker(argv: Sequence[str]) -> None:
    """One torchrun rank: ``python -m stages.finetune.selfcheck <spec.json> <out.npz>`` (rank 0 writes)."""
    from .distributed import finish, init

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


# ---------------------------------------------------------------------------------------------- statistics
def expected_count(sc: SelfcheckParams, mu: float, trials: int = 200, seed: int = 0) -> int:
    """Median number of right guesses of exact Gaussian scores (members N(mu, 1), others N(0, 1)): what a correct
    engine measured without loss gives (seeded simulation)."""
    from ..audit.one_run import guesses

    rng = np.random.default_rng([seed, 2])
    counts = []
    for _ in range(trials):
        y = rng.random(sc.canaries) < 0.5
        counts.append(guesses(rng.normal(size=sc.canaries) + mu * y, y, sc.guesses_in, sc.guesses_out)[2])
    return int(np.median(counts))


def verdict(sc: SelfcheckParams, trial: Trial, family: int) -> dict:
    """The bounds of one trial and its flag at 1 - alpha / family."""
    from ..audit.gdp import gdp_epsilon, gdp_epsilon_lower_bound, gdp_mu_lower_bound
    from ..audit.one_run import epsilon_lower_bound, guesses

    m, r, v = guesses(trial.scores, trial.members, sc.guesses_in, sc.guesses_out)
    delta, eps = trial.privacy["delta"], trial.privacy["epsilon_spent"]
    strict = 1.0 - sc.alpha / family
    mu = np.sqrt(trial.privacy["steps"]) / trial.privacy["noise_multiplier"]  # q = 1: the Gaussian mechanism
    gdp_strict = gdp_epsilon_lower_bound(m, r, v, delta, strict)
    return {"canaries": m, "members": int(np.sum(trial.members)), "guesses": r, "correct": v,
            "accountant_epsilon": eps, "delta": delta, "noise_multiplier": trial.privacy["noise_multiplier"],
            "eps_lb_95": epsilon_lower_bound(m, r, v, delta, 0.95),
            "eps_lb_999": epsilon_lower_bound(m, r, v, delta, strict),
            "gdp_eps_lb_95": gdp_epsilon_lower_bound(m, r, v, delta, 0.95),
            "gdp_eps_lb_999": gdp_strict, "gdp_mu_lb_999": gdp_mu_lower_bound(m, r, v, strict),
            "mu": float(mu), "confidence_999": strict,
            "ideal": gdp_epsilon_lower_bound(m, r, expected_count(sc, float(mu)), delta, 0.95)
            if gdp_epsilon(float(mu), delta) > 0 else 0.0,
            "flagged": bool(gdp_strict > eps)}


def configs_of(sc: SelfcheckParams) -> list[Config]:
    return [Config(c.mode, c.paradigm, c.processes) for c in sc.configs]


def check(sc: SelfcheckParams, configs: Sequence[Config] | None = None, seed: int | None = None,
          module: str = "stages.finetune.selfcheck", mutant: str | None = None, log=print) -> list[dict]:
    """Train and audit every configuration; rows as reports/selfcheck.json holds them."""
    configs = list(configs or configs_of(sc))
    base = sc.seed if seed is None else seed
    rows = []
    for k, config in enumerate(configs):
        trial = run_trial(sc, config, base * 1000 + k, module)
        row = {"mode": config.mode, "paradigm": config.paradigm, "processes": config.processes, "mutant": mutant,
               "seed": base * 1000 + k, **verdict(sc, trial, len(configs))}
        rows.append(row)
        log(format_row(row))
    return rows


# ---------------------------------------------------------------------------------------------- output
HEADER = (f"{'mode':6s} {'paradigm':17s} {'proc':>4s} {'acct eps':>8s} {'eps95':>6s} {'gdp95':>6s} "
          f"{'gdp999':>6s} {'ideal':>6s}  verdict")


def format_row(r: dict) -> str:
    return (f"{r['mode']:6s} {r['paradigm']:17s} {r['processes']:4d} {r['accountant_epsilon']:8.3f} "
            f"{r['eps_lb_95']:6.2f} {r['gdp_eps_lb_95']:6.2f} {r['gdp_eps_lb_999']:6.2f} {r['ideal']:6.2f}  "
            + ("FLAGGED: spends more than the accountant says" if r["flagged"] else "pass"))


def document(sc: SelfcheckParams, rows: list[dict]) -> dict:
    """reports/selfcheck.json: the design, what was and was not checked, and one row per configuration."""
    return {
        "version": SELFCHECK_VERSION,
        "design": {"canaries": sc.canaries, "guesses_in": sc.guesses_in, "guesses_out": sc.guesses_out,
                   "sample_rate": sc.sample_rate, "steps": sc.steps, "epsilon": sc.epsilon, "delta": sc.delta,
                   "max_grad_norm": sc.max_grad_norm, "accountant": sc.accountant, "optimizer": "sgd",
                   "alpha": sc.alpha, "family": len(rows), "seed": sc.seed,
                   "statistic": "movement of each canary's own coordinates along its gradient's direction",
                   "flag": "GDP one-run bound at 1 - alpha/family > the accountant's epsilon (q = 1: the claim is "
                           "exactly mu-GDP, so the Gaussian trade-off is the claim under test, not an assumption)"},
        "checked": "the fine-tune's DP path (loop.train: Poisson sampler, make_private, the mode's clipping, "
                   "opacus noise and accountant, DP-SGD; torchrun + opacus distributed optimizer with 2 processes) "
                   "on the layer types the paradigms train (Linear, Embedding, LoRA-wrapped Linear, RMSNorm)",
        "not_checked": "q < 1 (subsampling amplification is the accountant's maths, not exercised at q = 1); "
                       "multi-step composition beyond T = steps; DP-Adam/AdamW (post-processing of the same noisy "
                       "gradient); the prompt and prefix paradigms; transformer layers between the canary and its "
                       "rows; the real model's tokenizer, data and checkpoint resume",
        "all_pass": not any(r["flagged"] for r in rows),
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``leakaudit selfcheck``: the default configurations, the table, reports/selfcheck.json (exit 1 if flagged)."""
    import argparse

    from ..core.io import write_json
    from ..core.params import PARAMS_FILE, load

    ap = argparse.ArgumentParser(prog="leakaudit selfcheck", description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default=PARAMS_FILE)
    ap.add_argument("--out", default=None, help="default: selfcheck.out in params.yaml")
    args = ap.parse_args(argv)
    sc = load(SelfcheckParams, "selfcheck", args.params)
    print(f"DP engine self-check: {sc.canaries} gradient canaries, q = {sc.sample_rate}, T = {sc.steps}, "
          f"claimed ({sc.epsilon}, {sc.delta})-DP, {len(sc.configs)} configurations, "
          f"flag at {1 - sc.alpha / len(sc.configs):.5f}")
    print(HEADER)
    rows = check(sc)
    doc = document(sc, rows)
    write_json(Path(args.out or sc.out), doc)
    print("every configuration passes" if doc["all_pass"] else "FLAGGED: see the rows above")
    return 0 if doc["all_pass"] else 1


if __name__ == "__main__":
    worker(sys.argv[1:]) if len(sys.argv) == 3 and sys.argv[1].endswith(".json") else sys.exit(main())
