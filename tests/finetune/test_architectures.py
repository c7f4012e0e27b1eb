"""The built-in trainer on GPT-2, Qwen2 and GPT-NeoX (Llama: test_ghost.py; the unclipped step: all four), tiny random
models: ghost and bk give
opacus hooks' clipped sum in LoRA and full fine-tuning (with and without the embeddings), auto picks bk, LoRA
targets ``auto`` resolve to peft's mapping, a module without a sampler is refused by name, and the Conv1D and
LayerNorm samplers equal autograd's per-example gradients."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS
from testkit.models import dp_params, one_dp_step
from testkit.models import tiny_canary_lm as tiny_model
from transformers.pytorch_utils import Conv1D

from stages.finetune.loss import per_sample_losses
from stages.finetune.params import LoraParams
from stages.finetune.privacy.bookkeeping import weighted_grads
from stages.finetune.privacy.engine import make_private
from stages.finetune.privacy.layers.conv1d import conv1d_grad_sample, conv1d_norm_sample
from stages.finetune.privacy.layers.layer_norm import layer_norm_grad_sample, layer_norm_norm_sample
from stages.finetune.privacy.strategies import resolve
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import build
from stages.shared.lm.batching import collate
from stages.shared.lm.examples import canary_examples
from stages.shared.lm.scoring import token_logprobs
from stages.shared.lm.trainable import Trainable, load_model, lora_targets, save_model

CPU = torch.device("cpu")
ARCHS = ["gpt2", "qwen2", "gpt_neox"]
PARADIGMS = [("lora", False), ("full", False), ("full", True)]


@pytest.mark.parametrize("paradigm,embeddings", PARADIGMS)
@pytest.mark.parametrize("arch", ARCHS)
def test_ghost_and_bk_give_the_hooks_clipped_sum(tiny_base_of, arch, paradigm, embeddings):
    base = tiny_base_of(arch)
    for clip in (1e-2, 1e3):  # every example clipped / none clipped
        hooks, m, *_ = one_dp_step(base, "hooks", clip, False, paradigm, embeddings)
        assert hooks and torch.sqrt(sum((g ** 2).sum() for g in hooks.values())) > 0
        if embeddings:  # untied: the input embedding and the output head are two trained parameters
            emb, head = m.lm.get_input_embeddings().weight, m.lm.get_output_embeddings().weight
            assert emb is not head and emb.requires_grad and head.requires_grad
            assert sum(g.numel() for g in hooks.values()) >= emb.numel() + head.numel()
        for mode in ("ghost", "bk"):
            got, *_ = one_dp_step(base, mode, clip, False, paradigm, embeddings)
            assert got.keys() == hooks.keys()
            for n in got:
                torch.testing.assert_close(got[n], hooks[n], rtol=1e-4, atol=1e-7, msg=f"{arch} {mode} {n} clip {clip}")
    assert resolve(m, "auto")[0].name == "bk"


#: the tiny Llama in every clipping mode (LoRA, and full fine-tuning with the embeddings), and every other
#: architecture's layer types (Conv1D, LayerNorm, position embeddings, ...) in full fine-tuning under hooks
UNCLIPPED = ([("llama", mode, paradigm, embeddings) for mode in ("ghost", "bk", "hooks")
              for paradigm, embeddings in (("lora", False), ("full", True))]
             + [(arch, "hooks", "full", True) for arch in ARCHS])


@pytest.mark.parametrize("arch,mode,paradigm,embeddings", UNCLIPPED)
def test_unclipped_dp_gradient_is_the_plain_gradient(tiny_base_of, arch, mode, paradigm, embeddings):
    """With clipping that never binds and no noise, the DP step is the plain gradient of the summed loss over the
    expected batch: every layer's per-example gradient is counted exactly once."""
    base = tiny_base_of(arch)
    delta, _, exs, tok = one_dp_step(base, mode, 1e6, False, paradigm, embeddings)
    torch.manual_seed(0)
    ref, _ = tiny_model(base, paradigm=paradigm, virtual_tokens=3, train_embeddings=embeddings)
    ref.train()
    (per_sample_losses(ref, collate(exs[:8], tok.pad_token_id, CPU)).sum() / 4).backward()  # expected batch 0.5 * 8
    grads = {n: p.grad for n, p in ref.named_parameters() if p.requires_grad}
    assert grads.keys() == delta.keys()
    for n, g in grads.items():
        torch.testing.assert_close(delta[n], g, rtol=1e-4, atol=1e-7, msg=f"{arch} {mode} {n}")


@pytest.mark.parametrize("arch", ARCHS + ["llama"])
def test_lora_targets_auto_resolve_to_the_attention_projections(tiny_base_of, arch, tmp_path):
    torch.manual_seed(0)
    m, tok = tiny_model(tiny_base_of(arch), lora={"targets": "auto"})
    assert m.spec.lora_targets == tuple(PEFT_TARGETS[arch])
    record = m.spec.to_json()  # run.json's trainable block
    assert record["lora_targets"] == PEFT_TARGETS[arch]
    wrapped = {n.split(".lora_A")[0].split(".")[-1] for n, _ in m.named_parameters() if ".lora_A" in n}
    assert wrapped == set(PEFT_TARGETS[arch])
    # the attack stage rebuilds the model from run.json's trainable block: the same modules, the same tensors
    with torch.no_grad():
        for p in m.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    save_model(m, tmp_path)
    m2, _ = load_model(tiny_base_of(arch), tmp_path, Trainable.from_json(record), CPU)
    assert m2.spec == m.spec
    m.eval()
    rng = np.random.default_rng(0)
    rows = [{"kind": "new_token", "prefix_ids": rng.integers(1, m.base_vocab, 6).tolist(),
             "secret_ids": [m.base_vocab + i % 20]} for i in range(8)]
    for x, y in zip(token_logprobs(m, canary_examples(rows, "sft"), tok.pad_token_id),
                    token_logprobs(m2, canary_examples(rows, "sft"), tok.pad_token_id)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


def test_lora_targets_refuse_what_they_cannot_resolve():
    with pytest.raises(ConfigError, match=r"^finetune.lora.targets: 'auto' has no target modules for model type "
                                          r"'mystery'; list the module names$"):
        lora_targets(SimpleNamespace(config=SimpleNamespace(model_type="mystery")), "auto")
    assert lora_targets(None, ["c_attn"]) == ("c_attn",)
    ok = {"r": 4, "alpha": 8, "dropout": 0.0}
    assert build(LoraParams, {**ok, "targets": "auto"}, "finetune.lora").targets == "auto"
    assert build(LoraParams, {**ok, "targets": ["c_attn"]}, "finetune.lora").targets == ("c_attn",)
    for bad in ("q_proj", [], 3):
        with pytest.raises(ConfigError, match=r"^finetune.lora.targets: "):
            build(LoraParams, {**ok, "targets": bad}, "finetune.lora")


class OwnConv1D(Conv1D):
    """A Conv1D whose forward is its own: no sampler is registered for it (its math is not known)."""

    def forward(self, x):
        return super().forward(x)


class OwnLayerNorm(torch.nn.LayerNorm):
    def forward(self, x):
        return super().forward(x)


@pytest.mark.parametrize("arch,path,cls", [("gpt2", "lm.transformer.h.0.mlp.c_fc", OwnConv1D),
                                           ("gpt_neox", "lm.gpt_neox.layers.1.post_attention_layernorm", OwnLayerNorm)])
def test_a_module_without_sampler_is_refused_by_type_and_auto_records_why(tiny_base_of, arch, path, cls):
    torch.manual_seed(0)
    m, _ = tiny_model(tiny_base_of(arch), paradigm="full")
    m.get_submodule(path).__class__ = cls
    for mode in ("ghost", "bk"):
        params = [p for p in m.parameters() if p.requires_grad]
        with pytest.raises(ConfigError, match=rf"^finetune.dp.grad_sample_mode: ghost clipping has no norm sampler for "
                                              rf"{path} \({cls.__name__}\); use 'hooks'$"):
            make_private(m, torch.optim.SGD(params, lr=1.0), dp_params(enabled=True, grad_sample_mode=mode),
                         sample_rate=0.5, steps=1, population=8, seed=0, optimizer_name="sgd", device=CPU)
    params = [p for p in m.parameters() if p.requires_grad]
    private = make_private(m, torch.optim.SGD(params, lr=1.0), dp_params(enabled=True, grad_sample_mode="auto"),
                           sample_rate=0.5, steps=1, population=8, seed=0, optimizer_name="sgd", device=CPU)
    assert private.mode == private.privacy["grad_sample_mode"] == "hooks"
    assert private.privacy["grad_sample_mode_requested"] == "auto"
    why = f"ghost and bk have no norm sampler for {path} ({cls.__name__})"
    assert private.privacy["grad_sample_mode_reason"] == why


def _per_example(layer, a, g):
    """Autograd's per-example gradients of sum(layer(a_i) * g_i), one example at a time."""
    out = {n: [] for n, _ in layer.named_parameters()}
    for ai, gi in zip(a, g):
        layer.zero_grad()
        (layer(ai[None]) * gi[None]).sum().backward()
        for n, p in layer.named_parameters():
            out[n].append(p.grad.clone())
    return {n: torch.stack(v) for n, v in out.items()}


@pytest.mark.parametrize("shape", [(3, 5), (3,)])  # positions per example, or none
@pytest.mark.parametrize("kind", ["conv1d", "layer_norm"])
def test_conv1d_and_layer_norm_samplers_match_autograd(kind, shape):
    torch.manual_seed(0)
    layer = Conv1D(6, 4) if kind == "conv1d" else torch.nn.LayerNorm(4)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn_like(p))
    grad_fn, norm_fn = ((conv1d_grad_sample, conv1d_norm_sample) if kind == "conv1d"
                        else (layer_norm_grad_sample, layer_norm_norm_sample))
    a = torch.randn(*shape, 4)
    g = torch.randn(*layer(a).shape)
    want = _per_example(layer, a, g)
    names = {p: n for n, p in layer.named_parameters()}
    got = grad_fn(layer, [a], g)
    assert {names[p] for p in got} == {"weight", "bias"}
    for p, gs in got.items():
        torch.testing.assert_close(gs, want[names[p]])
    for p, norms in norm_fn(layer, [a], g).items():
        torch.testing.assert_close(norms, want[names[p]].flatten(1).norm(dim=1))
    coef = torch.rand(len(a))  # book-keeping's clipped sum, sum_i c_i grad_i
    c = coef.reshape(-1, *([1] * (g.dim() - 1)))
    for p, total in weighted_grads(layer)(layer, a, g * c).items():
        torch.testing.assert_close(total, torch.einsum("n,n...->...", coef, want[names[p]]))
