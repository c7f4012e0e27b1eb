"""CanaryLM: a causal LM plus ``num_new`` extra token rows that are trainable on their own.

New-token canaries need rows for tokens the base vocabulary lacks. Growing and training the whole
(tied, 49k-row) embedding is slow and breaks opacus ("No activations detected" for the tied
Embedding/Linear pair). Here the new tokens get two small ordinary modules instead:

* ``new_embed`` (nn.Embedding, N x d): input rows for ids >= base vocab size;
* ``new_head``  (nn.Linear d -> N):     output logit rows for those ids.

Both are plain modules called once per forward with batch-first shapes, so opacus computes their
per-sample gradients with its stock grad samplers and DP-SGD clips and noises them like any other
parameter. The rows are untied (input and output separate), initialised from the base model (mean of
the existing rows, or zero). The frozen base output layer is applied only at the positions a loss
or score needs, which is most of the saving on CPU: the 49k-way projection is the costliest layer.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


def _causal(lm: nn.Module) -> nn.Module:
    get = getattr(lm, "get_base_model", None)  # peft wrappers
    return get() if callable(get) else lm


class CanaryLM(nn.Module):
    def __init__(self, lm: nn.Module, num_new: int = 0, init: str = "mean"):
        super().__init__()
        self.lm = lm
        causal = _causal(lm)
        self.decoder = causal.base_model  # e.g. LlamaModel / GPT2Model (accepts inputs_embeds)
        self.embed = causal.get_input_embeddings()
        self.head = causal.get_output_embeddings()
        self.base_vocab = self.embed.num_embeddings
        self.num_new = int(num_new)
        d = self.embed.embedding_dim
        if self.num_new:
            dev, dt = self.embed.weight.device, self.embed.weight.dtype
            self.new_embed = nn.Embedding(self.num_new, d, device=dev, dtype=dt)
            self.new_head = nn.Linear(d, self.num_new, bias=False, device=dev, dtype=dt)
            self.reset_new_rows(init)

    @torch.no_grad()
    def reset_new_rows(self, init: str = "mean") -> None:
        if init == "zero":
            self.new_embed.weight.zero_()
            self.new_head.weight.zero_()
        elif init == "mean":
            self.new_embed.weight.copy_(self.embed.weight.float().mean(0).to(self.new_embed.weight.dtype))
            self.new_head.weight.copy_(self.head.weight.float().mean(0).to(self.new_head.weight.dtype))
        else:
            raise ValueError(f"unknown new-token init {init!r}")

    @property
    def vocab_size(self) -> int:
        return self.base_vocab + self.num_new

    def embed_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        if not self.num_new:
            return self.embed(input_ids)
        is_new = input_ids >= self.base_vocab
        base = self.embed(input_ids.masked_fill(is_new, 0))
        new = self.new_embed((input_ids - self.base_vocab).clamp(min=0).masked_fill(~is_new, 0))
        return torch.where(is_new.unsqueeze(-1), new, base)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        """Return (hidden states (B, T, d), new-token logits (B, T, N) or None)."""
        out = self.decoder(inputs_embeds=self.embed_ids(input_ids), attention_mask=attention_mask, use_cache=False)
        hidden = out[0]
        new_logits = self.new_head(hidden) if self.num_new else None
        return hidden, new_logits

    def logits_at(self, hidden, new_logits, rows, cols) -> torch.Tensor:
        """Full next-token logits (base + new rows) at the selected (row, col) positions -> (K, V+N)."""
        logits = self.head(hidden[rows, cols])
        if self.num_new:
            logits = torch.cat([logits, new_logits[rows, cols].to(logits.dtype)], dim=-1)
        return logits

    def logprobs_at(self, hidden, new_logits, rows, cols, targets) -> torch.Tensor:
        """log p(targets | context) at the selected (row, col) positions only -> (K,) float32."""
        logits = self.logits_at(hidden, new_logits, rows, cols)
        return logits.float().log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    # ------------------------------------------------------------------ persistence of the new rows
    def new_rows_state(self) -> dict[str, torch.Tensor]:
        if not self.num_new:
            return {}
        return {
            "new_embed": self.new_embed.weight.detach().cpu().contiguous(),
            "new_head": self.new_head.weight.detach().cpu().contiguous(),
        }

    def save_new_rows(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        state = self.new_rows_state()
        if state:
            save_file(state, str(path))

    @torch.no_grad()
    def load_new_rows(self, path: str | Path) -> None:
        from safetensors.torch import load_file

        state = load_file(str(path))
        self.new_embed.weight.copy_(state["new_embed"])
        self.new_head.weight.copy_(state["new_head"])
