"""The DP engine self-check (stages/finetune/selfcheck.py): the statistic is the linear model's, a correct engine
passes with a bound that means something, and every deliberately broken mechanism (tests/mutants.py) is flagged."""
import dataclasses
import os

import numpy as np
import pytest
import torch

import mutants
from flows import selfcheck as flow
from stages.core.params import load
from stages.finetune import selfcheck as S
from stages.finetune.loop import TrainConfig, train
from stages.finetune.params import SelfcheckParams
from stages.finetune.privacy.engine import public_divisor
from stages.finetune.probe import ProbeLM
from support import ROOT


def design(**overrides) -> SelfcheckParams:
    return dataclasses.replace(load(SelfcheckParams, "selfcheck", ROOT / "params.yaml"), **overrides)


@pytest.fixture
def no_noise(monkeypatch):
    """sigma -> 0: every noise draw is zero (the accountant still books sigma)."""
    import opacus.optimizers.optimizer as plain
    import opacus.optimizers.optimizer_fast_gradient_clipping as fast

    def zero(std, reference, generator=None, secure_mode=False):
        return torch.zeros_like(reference)

    monkeypatch.setattr(plain, "_generate_noise", zero)
    monkeypatch.setattr(fast, "_generate_noise", zero)


#: every clipping mode x paradigm; the fast tier runs a diagonal (each mode and each paradigm once), the slow tier all
_FAST = {("hooks", "rows"), ("ghost", "full"), ("bk", "train_embeddings"), ("hooks", "lora")}
MODE_PARADIGM = [pytest.param(m, p, n, marks=() if (m, p) in _FAST else pytest.mark.slow, id=f"{p}-{n}-{m}")
                 for p, n in [("rows", 4), ("full", 4), ("train_embeddings", 4), ("lora", 1)]
                 for m in ["hooks", "ghost", "bk"]]


@pytest.mark.parametrize("mode,paradigm,steps", MODE_PARADIGM)
def test_statistic_moves_with_inclusions_as_the_linear_model_predicts(no_noise, mode, paradigm, steps):
    """Without noise each member's score is lr * C * (steps that sampled it) / the public divisor, exactly; a
    non-member's is 0. (LoRA is linear in its own rows at the first step only: lora_A's gradient is 0 there.)"""
    m, q, lr, clip = 300, 0.5, 2.0, 0.7
    sc = design(canaries=m, max_grad_norm=clip, lr=lr)
    torch.manual_seed(3)
    model = ProbeLM(m, paradigm, d=2, scale=100.0, seed=3)
    members = S.membership(m, 3)
    pool = [e for e, y in zip(S.examples(m), members) if y]
    grads = S.gradient_directions(model)
    norms = torch.sqrt(sum((g.reshape(m, -1) ** 2).sum(1) for g in grads.values()))
    assert bool((norms > 10 * clip).all())  # every canary is clipped
    before = {n: p.detach().clone() for n, p in model.own_parameters().items()}
    res = train(model, pool, TrainConfig(
        steps=steps, batch_size=1, physical_batch_size=64, lr=lr, weight_decay=0.0, clip_norm=clip, seed=5, pad_id=0,
        dp=S.dp_config(sc, mode), sample_rate=q, optimizer="sgd", population=m, progress=False))
    scores = S.project(before, {n: p.detach() for n, p in model.own_parameters().items()}, grads)
    counts = np.zeros(m)
    counts[members] = res.inclusions
    assert counts.max() >= min(2, steps) and (counts[members] == 0).any()  # the draw varies: a count error shows
    np.testing.assert_allclose(scores, lr * clip * counts / public_divisor(q, m), rtol=1e-4, atol=1e-9)


@pytest.mark.slow  # a whole seeded self-check configuration (~20 s)
def test_a_correct_engine_passes_with_a_bound_that_means_something():
    sc = design()
    rows = flow.check(sc, [S.Config("bk", "lora", 1)], seed=11, log=lambda _: None)
    (row,) = rows
    assert not row["flagged"] and row["mutant"] is None
    assert row["accountant_epsilon"] == pytest.approx(sc.epsilon, abs=0.01)
    assert row["gdp_eps_lb_95"] >= 0.5 * row["accountant_epsilon"]
    assert row["eps_lb_95"] <= row["gdp_eps_lb_95"] and row["ideal"] >= 0.5 * sc.epsilon


@pytest.mark.slow  # a whole self-check configuration per mutant (10-40 s each); rank_noise under torchrun
@pytest.mark.parametrize("name,config", [
    ("noise_halved", S.Config("hooks", "rows", 1)),
    ("clip_off", S.Config("hooks", "full", 1)),
    ("clip_off", S.Config("bk", "lora", 1)),
    ("accountant_q", S.Config("ghost", "train_embeddings", 1)),
    ("rank_noise", S.Config("hooks", "full", 2)),
])
def test_each_broken_mechanism_is_flagged(monkeypatch, name, config):
    """One seeded configuration per mutant (family of 1, flagged at 99.9%); the rank mutant in 2 processes."""
    sc = design()
    if config.processes > 1:  # the torchrun workers import the mutant themselves
        monkeypatch.chdir(ROOT)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
        monkeypatch.setenv("SELFCHECK_MUTANT", name)
        (row,) = flow.check(sc, [config], seed=21, module="mutants", mutant=name, log=lambda _: None)
    else:
        with mutants.mutant(name):
            (row,) = flow.check(sc, [config], seed=21, mutant=name, log=lambda _: None)
    assert row["flagged"], row
    assert row["gdp_eps_lb_999"] > row["accountant_epsilon"]


def test_the_design_separates_half_the_noise_from_the_claim():
    """On exact Gaussian scores (what a lossless measurement of the engine gives), the params' design flags
    half the noise at 99.9% and passes the correct engine, at the default family size, over fresh seeds."""
    from stages.audit.gdp import gdp_epsilon_lower_bound, gdp_mu
    from stages.audit.one_run import guesses

    sc = design()
    family = len(sc.configs)
    mu = gdp_mu(sc.epsilon, sc.delta)
    flagged = {1.0: 0, 2.0: 0}
    for seed in range(5):
        rng = np.random.default_rng([seed, 99])
        y = rng.random(sc.canaries) < 0.5
        for k in flagged:
            m, r, v = guesses(rng.normal(size=sc.canaries) + k * mu * y, y, sc.guesses_in, sc.guesses_out)
            flagged[k] += gdp_epsilon_lower_bound(m, r, v, sc.delta, 1 - sc.alpha / family) > sc.epsilon
    assert flagged[1.0] == 0 and flagged[2.0] >= 3


def _probe_run(secure: bool, seed: int = 4):
    m = 200
    sc = design(canaries=m)
    torch.manual_seed(seed)
    model = ProbeLM(m, "rows", seed=seed)
    dp = dataclasses.replace(S.dp_config(sc, "bk"), secure_rng=secure)
    res = train(model, S.examples(m)[:120], TrainConfig(
        steps=3, batch_size=1, physical_batch_size=64, lr=1.0, weight_decay=0.0, clip_norm=1.0, seed=seed, pad_id=0,
        dp=dp, sample_rate=0.3, optimizer="sgd", population=m, progress=False))
    return res, model.new_embed.weight.detach().clone()


@pytest.mark.slow  # four whole DP training runs
def test_secure_rng_runs_differ_seeded_runs_repeat_and_the_log_holds_no_data_statistics():
    (a, wa), (b, wb) = _probe_run(True), _probe_run(True)
    assert not torch.equal(wa, wb) and not np.array_equal(a.inclusions, b.inclusions)  # noise and sampler unseeded
    assert a.privacy["rng"].startswith("secure")
    (c, wc), (d, wd) = _probe_run(False), _probe_run(False)
    assert torch.equal(wc, wd) and np.array_equal(c.inclusions, d.inclusions)
    assert c.privacy["rng"].startswith("seeded")
    for res in (a, c):  # a DP run's step log: the step index only (no batch size, tokens, loss or time)
        assert res.log == [{"step": k + 1} for k in range(3)]


def test_the_judgement_refuses_q_below_one_and_states_its_power():
    """The flag tests the claim itself only where DP-SGD is the Gaussian mechanism (q = 1); the document states how
    often the same test flags half the noise at the family's level."""
    from stages.audit import selfcheck as judge
    from stages.core.errors import ConfigError

    privacy = {"sample_rate": 0.5, "steps": 1, "noise_multiplier": 1.08, "delta": 1e-5, "epsilon_spent": 4.0}
    y = S.membership(100, 0)
    with pytest.raises(ConfigError, match="selfcheck.sample_rate"):
        judge.verdict(np.zeros(100), y, privacy, 10, 10, 0.001, 1)
    row = {**judge.verdict(np.where(y, 1.0, 0.0), y, {**privacy, "sample_rate": 1.0}, 10, 10, 0.001, 1),
           "mode": "bk", "paradigm": "rows", "processes": 1}
    power = judge.document({"guesses_in": 10, "guesses_out": 10, "alpha": 0.001}, [row])["power"]
    assert power["family"] == 1 and 0 <= power["flag_rate"] <= 1
