"""Tiny random causal LMs built in-process (Llama by default; GPT-2, Qwen2, GPT-NeoX), the fine-tune's tiny canary
model and one DP-SGD step through the engine."""
from __future__ import annotations

from pathlib import Path

from testkit.project import params


def make_tiny_lm(vocab_size: int, seed: int = 0, arch: str = "llama"):
    """A tiny random causal LM of architecture ``arch`` (gpt2 | llama | qwen2 | gpt_neox): hidden 32, 2 layers,
    4 heads, 128 positions, bos/eos/pad 0, no dropout (as the others, GPT-2's off: runs compare exactly); embeddings
    tied where the architecture ties them (not gpt_neox)."""
    import torch
    import transformers

    common = dict(vocab_size=vocab_size, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    configs = {
        "llama": lambda: transformers.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=128, tie_word_embeddings=True, **common),
        "qwen2": lambda: transformers.Qwen2Config(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=128, tie_word_embeddings=True, **common),
        "gpt2": lambda: transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=128,
                                                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                                tie_word_embeddings=True, **common),
        "gpt_neox": lambda: transformers.GPTNeoXConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128, tie_word_embeddings=False, **common),
    }
    if arch not in configs:
        raise ValueError(f"unknown tiny architecture {arch!r} (known: {', '.join(configs)})")
    torch.manual_seed(seed)
    cfg = configs[arch]()
    cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
           "gpt2": transformers.GPT2LMHeadModel, "gpt_neox": transformers.GPTNeoXForCausalLM}[arch]
    return cls(cfg).eval()


#: new-token rows and the vocabulary ids with rows of their own in ``tiny_canary_lm``'s models
NUM_NEW = 20
SECRET_ROWS = (7, 13, 29, 31, 50, 77)


def finetune_params(**overrides):
    from stages.finetune.params import FinetuneParams

    return params(FinetuneParams, "finetune", **overrides)


def dp_params(**overrides):
    from stages.finetune.params import DPParams

    return params(DPParams, "finetune.dp", **overrides)


def tiny_canary_lm(base: Path, device=None, **overrides):
    """(CanaryLM, tokenizer) of the converted tiny base ``base`` with LoRA r=4 (or ``overrides``), NUM_NEW new-token
    rows and the SECRET_ROWS vocabulary ids' own rows, on ``device`` (default: the CPU)."""
    import torch

    from stages.shared.lm.trainable import build_model

    ft = finetune_params(**{"lora": {"r": 4, "alpha": 8}, **overrides})
    meta = {"num_new_tokens": NUM_NEW, "new_token_init": "mean", "secret_token_ids": list(SECRET_ROWS)}
    return build_model(base, ft.trainable(meta), device or torch.device("cpu"))


def canary_rows(vocab: int, n: int = 40, seed: int = 0) -> list[dict]:
    """``n`` one-token new-token canaries over a vocabulary of ``vocab`` (their secrets: new tokens
    vocab + i % NUM_NEW), every odd one a member."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [{"canary_id": f"c{i}", "kind": "new_token", "prefix_ids": rng.integers(1, 300, 6).tolist(),
             "secret_ids": [vocab + i % NUM_NEW], "member": bool(i % 2)} for i in range(n)]


def one_dp_step(base: Path, mode: str, clip: float, noise: bool, paradigm: str, embeddings: bool, device=None):
    """Parameter change of one DP-SGD step (lr 1) over 8 canaries in chunks of 3 (minus the gradient) through the
    engine's ``dp_step`` on ``device`` (default: the CPU); also the model, the examples and the tokenizer."""
    import numpy as np
    import torch

    from stages.finetune.privacy.engine import dp_step, make_private
    from stages.shared.lm.batching import chunks
    from stages.shared.lm.examples import canary_examples

    cpu = device or torch.device("cpu")
    torch.manual_seed(0)
    m, tok = tiny_canary_lm(base, cpu, paradigm=paradigm, virtual_tokens=3, train_embeddings=embeddings)
    exs = canary_examples(canary_rows(m.base_vocab, 12), "sft")
    before = {n: p.detach().clone() for n, p in m.named_parameters() if p.requires_grad}
    trainable = [p for p in m.parameters() if p.requires_grad]
    dp = dp_params(enabled=True, epsilon=8.0, delta=1e-5, grad_sample_mode=mode, max_grad_norm=clip)
    private = make_private(m, torch.optim.SGD(trainable, lr=1.0), dp, sample_rate=0.5, steps=1, population=8,
                           seed=0, optimizer_name="sgd", device=cpu)
    if not noise:
        private.optimizer.noise_multiplier = 0.0
    parts = chunks(np.arange(8), [len(e) for e in exs], 3)
    m.keep_input = private.strategy.norm_pass
    private.net.train()
    dp_step(private, trainable, exs, parts, tok.pad_token_id, cpu)
    return {n: before[n] - p.detach() for n, p in m.named_parameters() if p.requires_grad}, m, exs, tok
