"""The self-check's probe model: a small network in the fine-tune's own model interface (``CanaryLM``'s
``forward`` / ``logprobs_at`` / ``keep_input``) whose m audit canaries each own their coordinates.

Example i is the single input token i. Its "log-probability" is linear in coordinates that no other example
touches, ``lp_i = scale * s_i`` with s_i a sum of one entry (row) per trainable module:

* ``rows`` (the new-token / secret rows every paradigm trains): an ``nn.Embedding`` row i and the output row i
  of an ``nn.Linear`` (d -> m);
* ``lora``: those rows plus a peft LoRA-wrapped ``nn.Linear`` (d -> m) whose output i is read; lora_B's row i
  is canary i's own (lora_B starts at zero, as peft initialises it, so lora_A's gradient is 0 at the first
  step: the whole gradient lies in own coordinates then; later steps add a shared lora_A part);
* ``full``: the rows plus a trainable decoder ``nn.Linear`` (d -> m) and a Llama ``RMSNorm`` (m) whose
  output i is read;
* ``train_embeddings``: the rows plus an (untied) input ``nn.Embedding`` and output ``nn.Linear`` head.

Every trainable tensor but lora_A has the canaries along its first axis, so canary i's coordinates are
``p[i]`` for each of them (``own_parameters``). The per-example gradient is then a constant vector (``scale``
times a fixed direction) in those coordinates: each step moves them by the clipped gradient when i is in the
batch, plus noise. This is the linear model the self-check's statistic reads (``selfcheck.py``). The modules are
the layer types the fine-tune trains, wrapped and clipped by the same opacus code (and, for RMSNorm, the
project's own grad and norm samplers).
"""
from __future__ import annotations

import torch
from torch import nn

PARADIGMS = ("rows", "lora", "full", "train_embeddings")


class _Decoder(nn.Module):
    """Holds the projection peft wraps (peft injects by module name)."""

    def __init__(self, d: int, m: int):
        super().__init__()
        self.proj = nn.Linear(d, m, bias=False)


class ProbeLM(nn.Module):
    def __init__(self, m: int, paradigm: str, *, d: int = 2, scale: float = 100.0, lora_r: int = 2, seed: int = 0):
        super().__init__()
        if paradigm not in PARADIGMS:
            raise ValueError(f"unknown probe paradigm {paradigm!r} (known: {', '.join(PARADIGMS)})")
        self.m, self.d, self.paradigm, self.scale = int(m), int(d), paradigm, float(scale)
        self.keep_input = False
        self.last_input: torch.Tensor | None = None
        gen = torch.Generator().manual_seed(seed)
        unit = lambda: nn.functional.normalize(torch.randn(d, generator=gen), dim=0)  # noqa: E731
        self.register_buffer("x0", unit())  # the constant input of the Linear layers
        self.register_buffer("a_rows", unit())  # what s_i reads from an embedding row
        self.new_embed = nn.Embedding(m, d)
        self.new_head = nn.Linear(d, m, bias=False)
        if paradigm == "lora":
            from peft import LoraConfig, inject_adapter_in_model

            self.decoder = _Decoder(d, m)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                inject_adapter_in_model(LoraConfig(r=lora_r, lora_alpha=lora_r, lora_dropout=0.0,
                                                   target_modules=["proj"], bias="none"), self.decoder)
            for name, p in self.decoder.named_parameters():
                p.requires_grad_("lora_" in name)
        elif paradigm == "full":
            from transformers.models.llama.modeling_llama import LlamaRMSNorm

            self.decoder = _Decoder(d, m)
            self.norm = LlamaRMSNorm(m, eps=1e-12)
        elif paradigm == "train_embeddings":
            self.register_buffer("a_embed", unit())
            self.embed = nn.Embedding(m, d)
            self.head = nn.Linear(d, m, bias=False)
        with torch.no_grad():  # own coordinates start at 0: the movement is exactly representable
            for p in self.own_parameters().values():
                p.zero_()

    def own_parameters(self) -> dict[str, nn.Parameter]:
        """Trainable tensors with the canaries along axis 0 (canary i owns ``p[i]``): all but lora_A."""
        return {n: p for n, p in self.named_parameters() if p.requires_grad and "lora_A" not in n}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        """(s per example (B, 1), None): s_i, the sum of canary i's own entries (``input_ids`` (B, 1) = i)."""
        ids = input_ids[:, :1]
        B = ids.shape[0]
        x = self.x0.expand(B, -1)
        if self.keep_input and torch.is_grad_enabled():
            # the ghost norm pass differentiates towards this input, so every layer's norm sampler sees its
            # output gradient (as CanaryLM's decoder input embeddings)
            x = x.clone().requires_grad_(True)
            self.last_input = x
        s = self.new_embed(ids)[:, 0] @ self.a_rows + self.new_head(x).gather(1, ids)[:, 0]
        if self.paradigm in ("lora", "full"):
            s = s + self.decoder.proj(x).gather(1, ids)[:, 0]
        if self.paradigm == "full":
            ones = (x[:, :1] * 0 + 1).expand(B, self.m)  # a constant input on the graph of x
            s = s + self.norm(ones).gather(1, ids)[:, 0]
        if self.paradigm == "train_embeddings":
            s = s + self.embed(ids)[:, 0] @ self.a_embed + self.head(x).gather(1, ids)[:, 0]
        return s.unsqueeze(1), None

    def logprobs_at(self, hidden, new_logits, rows, cols, targets) -> torch.Tensor:
        """The linear probe loss's "log-probability" at the labelled positions: scale * s (one per example)."""
        return self.scale * hidden[rows, cols].float()
