"""Sharded DP fine-tuning (``finetune.distributed.strategy: fsdp``, stages/finetune/sharding.py) is the mechanism
one process runs: the same clipped update, the same noise added once, the same state after a resume.

The slow tests train a tiny CanaryLM (own token rows and secret rows) in 2 gloo processes under FSDP2
(testkit/sharding_trials.py, launched as the stage launches its ranks) and in this process, through ``loop.train``.
"""
from __future__ import annotations

import json
import math

import pytest
import torch
import yaml
from testkit.project import ROOT

from stages.finetune.params import load_finetune
from stages.finetune.privacy.strategies import resolve
from stages.finetune.sharding import untie_frozen
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import read_params


def _params(tmp_path, **distributed_and_dp):
    raw = read_params(ROOT / "params.yaml")
    dp = distributed_and_dp.pop("dp", {})
    raw["runs"]["probe"] = {"distributed": distributed_and_dp, "dp": dp}
    raw["attack"]["runs"]["probe"] = None
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("setting,needs", [
    (dict(nproc_per_node=1, strategy="fsdp", dp={"enabled": True}), "nproc_per_node >= 2"),
    (dict(nproc_per_node=2, strategy="fsdp", dp={"enabled": False}), "dp.enabled: true"),
    (dict(nproc_per_node=2, strategy="fsdp", dp={"enabled": True, "grad_sample_mode": "bk"}), "ghost or auto"),
    (dict(nproc_per_node=2, strategy="fsdp", dp={"enabled": True, "grad_sample_mode": "hooks"}), "ghost or auto"),
    (dict(nproc_per_node=2, strategy="zero3", dp={"enabled": True}), "ddp"),
])
def test_params_refuse_what_fsdp_cannot_run_in_one_line_naming_the_key(tmp_path, setting, needs):
    with pytest.raises(ConfigError) as err:
        load_finetune("probe", _params(tmp_path, **setting))
    msg = str(err.value)
    assert "runs.probe.distributed.strategy" in msg and needs in msg and "\n" not in msg, msg


def test_params_accept_a_sharded_dp_run(tmp_path):
    ft = load_finetune("probe", _params(tmp_path, nproc_per_node=2, strategy="fsdp",
                                        dp={"enabled": True, "grad_sample_mode": "auto"}))
    assert ft.distributed.strategy == "fsdp" and ft.distributed.nproc_per_node == 2


def test_a_sharded_model_is_clipped_by_ghost_fsdp_and_other_modes_are_refused():
    model = torch.nn.Linear(2, 2)
    assert resolve(model, "ghost", sharded=True)[0].name == "ghost_fsdp"
    strategy, why = resolve(model, "auto", sharded=True)
    assert strategy.name == "ghost_fsdp" and why == "sharded by fsdp"
    for mode in ("bk", "hooks"):
        with pytest.raises(ConfigError, match="ghost or auto"):
            resolve(model, mode, sharded=True)
    with pytest.raises(ConfigError, match="strategy: fsdp"):
        resolve(model, "ghost_fsdp")
    assert resolve(model, "auto")[0].name == "bk"  # never auto's choice for a whole model


def test_a_frozen_tied_weight_gets_its_own_copy_and_a_trainable_one_is_refused():
    emb, head = torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    emb.weight.requires_grad_(False)
    untie_frozen(model)
    assert head.weight is not emb.weight and torch.equal(head.weight, emb.weight)
    assert not head.weight.requires_grad
    head.weight = emb.weight
    emb.weight.requires_grad_(True)
    with pytest.raises(ConfigError, match="tied trainable weight emb.weight"):
        untie_frozen(model)


# ------------------------------------------------------------------------------------------------ 2 processes
def _launch(specs: list[dict], tmp_path, monkeypatch, name: str = "trials") -> list[dict]:
    """The trials in 2 torchrun processes (rank 0's results)."""
    from stages.finetune.distributed import launch

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    spec, out = tmp_path / f"{name}.json", tmp_path / f"{name}.pt"
    spec.write_text(json.dumps(specs))
    launch([str(spec), str(out)], 2, module="testkit.sharding_trials")
    return torch.load(out, weights_only=False)


def _local(specs: list[dict]) -> list[dict]:
    """The trials in this process (the single-process reference)."""
    from testkit import sharding_trials

    with torch.random.fork_rng(devices=[]):
        return [sharding_trials.trial(s) for s in specs]


def _assert_same_update(got: dict, want: dict, rtol: float) -> None:
    """Equal to ``rtol``, plus 1e-5 of the largest update (entries that sum to ~0 carry float noise only)."""
    assert got.keys() == want.keys()
    scale = max(float(v.abs().max()) for v in want.values())
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=rtol, atol=1e-5 * scale, msg=k)


#: the paradigms and architectures of the equality test: LoRA and full fine-tuning (with the embeddings and head
#: trainable: own token rows, secret rows, input embedding and untied head) on tiny Llama and GPT-2 (Conv1D)
CASES = [("llama", "lora", False), ("llama", "full", True), ("gpt2", "lora", False), ("gpt2", "full", False)]


@pytest.mark.slow  # 2 torchrun launches of 2 processes, 4 trainings each, and 4 in this process (~1-2 min)
def test_without_noise_fsdp_gives_the_single_process_update(tiny_base_of, tmp_path, monkeypatch):
    """Noise off, every example clipped (C far below every per-example gradient norm): the update of 2 steps of
    DP-SGD over 12 examples in chunks of 3 (2 chunks per rank per step) equals one process's."""
    specs = [dict(base=str(tiny_base_of(arch)), paradigm=paradigm, embeddings=emb, clip=1e-3, steps=2,
                  sharding="fsdp") for arch, paradigm, emb in CASES]
    sharded = _launch(specs, tmp_path, monkeypatch)
    for spec, got, want in zip(specs, sharded, _local(specs)):
        assert got["privacy"]["grad_sample_mode"] == "ghost_fsdp" and got["privacy"]["sharding"] == "fsdp"
        assert want["privacy"]["grad_sample_mode"] == "ghost" and want["privacy"]["world_size"] == 1
        _assert_same_update(got["update"], want["update"], 1e-4)
        moved = max(float(v.abs().max()) for v in want["update"].values())
        assert moved > 0
        assert got["nll"] == pytest.approx(want["nll"], rel=1e-5)  # rank 0 scores the gathered model


@pytest.mark.slow  # a torchrun launch of 5 trainings and 4 in this process (~1 min)
def test_with_noise_fsdp_adds_the_specified_noise_once(tiny_base, tmp_path, monkeypatch):
    """Noise on, 4 seeds: the realised noise (noisy update minus the noiseless one, in units of lr sigma C / B) is
    standard normal in every coordinate. Over the 4 seeds' coordinates its mean square is within 5 standard
    errors of 1 (SE = sqrt(2 / dof)); noise added twice (once per rank) gives 2 and noise from one rank only 1/2,
    each at least 35 SE away at this dof. The FSDP update also equals the single-process draw (same generator)."""
    base = dict(base=str(tiny_base), paradigm="lora", clip=1e-3, steps=1, sharding="fsdp")
    specs = [base] + [dict(base, noise=True, seed=s) for s in range(4)]
    noiseless, *noisy = _launch(specs, tmp_path, monkeypatch)
    local = _local(specs[1:])
    squares, dof = 0.0, 0
    for got, want in zip(noisy, local):
        _assert_same_update(got["update"], want["update"], 1e-4)
        pv = got["privacy"]
        unit = pv["noise_multiplier"] * pv["max_grad_norm"] / pv["public_divisor"]  # lr 1: one step's noise std
        for k, v in got["update"].items():
            z = (v - noiseless["update"][k]).double() / unit
            squares += float((z ** 2).sum())
            dof += z.numel()
    se = math.sqrt(2 / dof)
    assert dof >= 10_000 and 0.5 / se >= 35  # the power stated above
    assert abs(squares / dof - 1) < 5 * se, (squares / dof, se, dof)


@pytest.mark.slow  # 3 torchrun launches (~1.5 min)
@pytest.mark.parametrize("paradigm,embeddings", [("full", True)])
def test_a_sharded_run_stopped_after_its_checkpoint_resumes_to_the_uninterrupted_run(tiny_base, tmp_path,
                                                                                     monkeypatch, paradigm,
                                                                                     embeddings):
    """DP-Adam with noise, 3 steps, a sharded checkpoint (torch.distributed.checkpoint) after every step: a run
    killed after step 1 and restarted resumes from step 1 and ends where the uninterrupted run ends. Full
    fine-tuning with the embeddings, every parameter in the checkpoint (a LoRA run, whose frozen base is in no
    checkpoint, is stopped and resumed through the whole pipeline in tests/flows/test_sharded_pipeline.py)."""
    ck = tmp_path / "ck" / "run.pt"
    spec = dict(base=str(tiny_base), paradigm=paradigm, embeddings=embeddings, clip=1e-3, steps=3,
                optimizer="adamw", lr=1e-3, noise=True, sharding="fsdp", q=0.5)
    (whole,) = _launch([spec], tmp_path, monkeypatch, "whole")
    (stopped,) = _launch([dict(spec, checkpoint=str(ck), stop_after=1)], tmp_path, monkeypatch, "stopped")
    assert stopped["stopped"] and (ck.parent / "run.dcp" / "meta.pt").is_file()
    (resumed,) = _launch([dict(spec, checkpoint=str(ck))], tmp_path, monkeypatch, "resumed")
    assert resumed["resumed_from"] == 1 and whole["resumed_from"] == 0
    assert not (ck.parent / "run.dcp").exists()  # cleared at the end
    _assert_same_update(resumed["update"], whole["update"], 1e-6)
    assert resumed["privacy"]["epsilon_spent"] == whole["privacy"]["epsilon_spent"]
