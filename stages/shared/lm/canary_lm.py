"""CanaryLM: a causal LM plus ``num_new`` extra token rows that are trainable on their own, and
optionally a soft prompt (prompt tuning) or trainable key/value prefixes (prefix tuning).

New-token canaries need rows for tokens the base vocabulary lacks. Growing and training the whole
(tied, 49k-row) embedding is slow and breaks opacus ("No activations detected" for the tied
Embedding/Linear pair). Here the new tokens get two small ordinary modules instead:

* ``new_embed`` (nn.Embedding, N x d): input rows for ids >= base vocab size;
* ``new_head``  (nn.Linear d -> N):     output logit rows for those ids.

Vocabulary tokens used as canary secrets get the same treatment (``secret_rows``): every such id has
its own trainable input row (``row_embed``) and output row (``row_head``), initialised from the base
model's rows, so each canary kind trains the same parameters for its secret tokens (the seed trains
the embeddings, privacy-auditing-of-llms Table 14; without this only new-token secrets could be
learned through their own rows and the kinds would differ in parameterisation, not only design).

All four are plain modules called once per forward with batch-first shapes, so opacus computes their
per-sample gradients with its stock grad samplers and DP-SGD clips and noises them like any other
parameter. The rows are untied (input and output separate), initialised from the base model (mean of
the existing rows, or zero). The frozen base output layer is applied only at the positions a loss
or score needs, which is most of the saving on CPU: the 49k-way projection is the costliest layer.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from ..core.seeds import stream

PROMPT_INIT_SEED = stream("lm.prompt_init").int_seed()


def _causal(lm: nn.Module) -> nn.Module:
    get = getattr(lm, "get_base_model", None)  # peft wrappers
    return get() if callable(get) else lm


class CanaryLM(nn.Module):
    """``soft_prompt`` > 0: prompt tuning (peft PromptEmbedding, prepended to the input embeddings);
    ``prefix`` > 0: prefix tuning (peft PrefixEncoder, a trainable key/value prefix in every layer).
    Both are plain batch-first embedding lookups, so opacus clips and noises them per example."""

    def __init__(self, lm: nn.Module, num_new: int = 0, init: str = "mean", soft_prompt: int = 0, prefix: int = 0,
                 secret_rows: Sequence[int] = ()):
        super().__init__()
        self.lm = lm
        causal = _causal(lm)
        self.config = causal.config
        # views into ``lm``, kept out of the module tree: a submodule reachable twice would be hooked twice by
        # opacus (it walks children, not unique modules), doubling its per-example gradients
        self.__dict__.update(decoder=causal.base_model,  # e.g. LlamaModel / GPT2Model (accepts inputs_embeds)
                             embed=causal.get_input_embeddings(), head=causal.get_output_embeddings())
        #: the decoder takes position ids (forward_embeds passes them, one row per example)
        self.positions = "position_ids" in inspect.signature(self.decoder.forward).parameters
        self.base_vocab = self.embed.num_embeddings
        self.num_new = int(num_new)
        d = self.embed.embedding_dim
        dev, dt = self.embed.weight.device, self.embed.weight.dtype
        if self.num_new:
            self.new_embed = nn.Embedding(self.num_new, d, device=dev, dtype=dt)
            self.new_head = nn.Linear(d, self.num_new, bias=False, device=dev, dtype=dt)
            self.reset_new_rows(init)
        self._init_secret_rows(secret_rows)
        self.soft_prompt = int(soft_prompt)
        self.prefix_len = int(prefix)
        #: set by the ghost-clipping DP step: forward keeps the decoder's input embeddings (made to require grad)
        #: in ``last_input`` so the norm pass can stop there instead of computing every weight gradient
        self.keep_input = False
        self.last_input: torch.Tensor | None = None
        if self.soft_prompt:
            from peft import PromptTuningConfig
            from peft.tuners.prompt_tuning import PromptEmbedding

            cfg = PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=self.soft_prompt, token_dim=d,
                                     num_transformer_submodules=1, prompt_tuning_init="SAMPLE_VOCAB")
            with torch.random.fork_rng(devices=[]):  # the init draws vocabulary rows: keep it seeded and local
                torch.default_generator.manual_seed(PROMPT_INIT_SEED)
                self.prompt = PromptEmbedding(cfg, self.embed).to(device=dev, dtype=dt)
        if self.prefix_len:
            from peft import PrefixTuningConfig
            from peft.tuners.prefix_tuning import PrefixEncoder

            c = self.config
            heads = c.num_attention_heads
            self.kv_heads = getattr(c, "num_key_value_heads", None) or heads
            self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
            self.layers = c.num_hidden_layers
            kv_dim = self.kv_heads * self.head_dim
            cfg = PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=self.prefix_len, token_dim=kv_dim,
                                     num_layers=self.layers, num_attention_heads=self.kv_heads,
                                     encoder_hidden_size=kv_dim, prefix_projection=False)
            self.prefix = PrefixEncoder(cfg).to(device=dev, dtype=dt)
            self.init_prefix()

    @torch.no_grad()
    def init_prefix(self) -> None:
        """Start the prefix from the base model's own keys/values of random vocabulary tokens
        (an activation-based init, as Li & Liang recommend over random vectors)."""
        gen = torch.Generator().manual_seed(PROMPT_INIT_SEED)
        ids = torch.randint(0, self.base_vocab, (1, self.prefix_len), generator=gen).to(self.embed.weight.device)
        cache = self.decoder(input_ids=ids, use_cache=True).past_key_values
        kv = torch.stack([torch.stack([cache.layers[i].keys[0], cache.layers[i].values[0]])
                          for i in range(self.layers)])
        # (L, 2, kv_heads, n, head_dim) -> (n, L*2*kv_heads*head_dim), the layout forward() reads back
        weight = kv.reshape(self.layers * 2, self.kv_heads, self.prefix_len, self.head_dim).permute(2, 0, 1, 3)
        self.prefix.embedding.weight.copy_(weight.reshape(self.prefix_len, -1))

    @torch.no_grad()
    def _init_secret_rows(self, ids: Sequence[int]) -> None:
        """Own trainable input/output rows for the vocabulary ids ``ids``, copied from the base model."""
        ids = sorted({int(i) for i in ids})
        if ids and not (0 <= ids[0] and ids[-1] < self.base_vocab):
            raise ValueError(f"secret rows must be vocabulary ids in [0, {self.base_vocab}), got {ids[0]}..{ids[-1]}")
        self.num_rows = len(ids)
        if not self.num_rows:
            return
        w = self.embed.weight
        idx = torch.tensor(ids, dtype=torch.long, device=w.device)
        self.register_buffer("row_ids", idx, persistent=False)
        index = torch.full((self.base_vocab,), -1, dtype=torch.long, device=w.device)
        index[idx] = torch.arange(len(ids), device=w.device)
        self.register_buffer("row_index", index, persistent=False)
        self.row_embed = nn.Embedding(len(ids), w.shape[1], device=w.device, dtype=w.dtype)
        self.row_embed.weight.copy_(w[idx])
        self.row_head = nn.Linear(w.shape[1], len(ids), bias=False, device=w.device, dtype=w.dtype)
        self.row_head.weight.copy_(self.head.weight[idx])

    def _prefix_cache(self, batch: int):
        from transformers import DynamicCache

        # contiguous: opacus' embedding norm sampler views the ids
        idx = torch.arange(self.prefix_len, device=self.embed.weight.device).expand(batch, -1).contiguous()
        kv = self.prefix(idx).view(batch, self.prefix_len, self.layers * 2, self.kv_heads, self.head_dim)
        kv = kv.permute(2, 0, 3, 1, 4)  # (L*2, B, kv_heads, n, head_dim)
        return DynamicCache(ddp_cache_data=[(kv[2 * i], kv[2 * i + 1]) for i in range(self.layers)], config=self.config)

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

    def embed_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        if not self.num_new and not self.num_rows:
            return self.embed(input_ids)
        is_new = input_ids >= self.base_vocab
        base_ids = input_ids.masked_fill(is_new, 0)
        out = self.embed(base_ids)
        if self.num_rows:
            row = self.row_index[base_ids].masked_fill(is_new, -1)
            out = torch.where((row >= 0).unsqueeze(-1), self.row_embed(row.clamp(min=0)), out)
        if self.num_new:
            new = self.new_embed((input_ids - self.base_vocab).clamp(min=0).masked_fill(~is_new, 0))
            out = torch.where(is_new.unsqueeze(-1), new, out)
        return out

    def extra_logits(self, hidden: torch.Tensor) -> torch.Tensor | None:
        """Logits of the model's own rows at every position, (..., num_new + num_rows): the new tokens'
        (appended after the base vocabulary) then the secret rows' (replacing their base columns)."""
        parts = ([self.new_head(hidden)] if self.num_new else []) + ([self.row_head(hidden)] if self.num_rows else [])
        return torch.cat(parts, -1) if len(parts) > 1 else (parts[0] if parts else None)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        """Return (hidden states (B, T, d), own-row logits (B, T, N + S) or None) for the real tokens."""
        return self.forward_embeds(self.embed_ids(input_ids), attention_mask)

    def forward_embeds(self, emb: torch.Tensor, attention_mask: torch.Tensor | None = None):
        """``forward`` from input embeddings (B, T, d): the soft prompt / prefix are applied as usual."""
        B = emb.shape[0]
        if self.keep_input and torch.is_grad_enabled():
            emb = emb if emb.requires_grad else emb.detach().requires_grad_(True)
            self.last_input = emb
        if attention_mask is None:
            attention_mask = torch.ones(emb.shape[:2], dtype=torch.long, device=emb.device)
        kw: dict = {"use_cache": False}
        if self.soft_prompt:
            idx = torch.arange(self.soft_prompt, device=emb.device).expand(B, -1).contiguous()
            emb = torch.cat([self.prompt(idx).to(emb.dtype), emb], dim=1)
            attention_mask = torch.cat([attention_mask.new_ones(B, self.soft_prompt), attention_mask], dim=1)
        if self.prefix_len:
            kw = {"past_key_values": self._prefix_cache(B), "use_cache": True}
            attention_mask = torch.cat([attention_mask.new_ones(B, self.prefix_len), attention_mask], dim=1)
        if self.positions:  # batch-first (B, T), not the decoder's default (1, T): opacus needs one row per example
            past = self.prefix_len  # for a trainable position embedding (GPT-2's wpe in full fine-tuning)
            kw["position_ids"] = torch.arange(past, past + emb.shape[1], device=emb.device).expand(B, -1).contiguous()
        hidden = self.decoder(inputs_embeds=emb, attention_mask=attention_mask, **kw)[0]
        hidden = hidden[:, self.soft_prompt:]  # the soft prompt's own positions predict nothing
        return hidden, self.extra_logits(hidden)

    def logits_at(self, hidden, new_logits, rows, cols) -> torch.Tensor:
        """Full next-token logits (base, secret rows replaced, + new rows) at the selected (row, col)
        positions -> (K, V+N). ``new_logits``: ``forward``'s second output (``extra_logits``).

        A trainable head (``train_embeddings``) is applied to every position while training, batch first, so
        opacus sees one example per row; otherwise only at the selected positions (the 49k-way projection
        is the costliest layer on CPU)."""
        if torch.is_grad_enabled() and self.head.weight.requires_grad:
            logits = self.head(hidden)[rows, cols]
        else:
            logits = self.head(hidden[rows, cols])
        if new_logits is None:
            return logits
        own = new_logits[rows, cols].to(logits.dtype)
        if self.num_rows:
            logits = logits.index_copy(1, self.row_ids, own[:, self.num_new:])
        if self.num_new:
            logits = torch.cat([logits, own[:, :self.num_new]], dim=-1)
        return logits

    def logprobs_at(self, hidden, new_logits, rows, cols, targets) -> torch.Tensor:
        """log p(targets | context) at the selected (row, col) positions only -> (K,) float32."""
        logits = self.logits_at(hidden, new_logits, rows, cols)
        return logits.float().log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    # ------------------------------------------------------------------ persistence
    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Every trainable tensor (LoRA, new rows, prompt/prefix, or the decoder for full FT)."""
        return {n: p.detach().cpu().contiguous() for n, p in self.named_parameters() if p.requires_grad}

    def save_trainable(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        save_file(self.trainable_state(), str(path))

    def load_trainable(self, path: str | Path) -> None:
        from safetensors.torch import load_file

        self.load_tensors(load_file(str(path)), str(path))

    @torch.no_grad()
    def load_tensors(self, state: dict[str, torch.Tensor], source: str) -> None:
        """Copy ``state`` (name -> tensor, e.g. ``trainable_state``'s) into this model's parameters."""
        params = dict(self.named_parameters())
        missing = [k for k in state if k not in params]
        if missing:
            raise KeyError(f"{source}: tensors {missing[:3]} do not exist in this model")
        for k, v in state.items():
            params[k].copy_(v.to(device=params[k].device, dtype=params[k].dtype))
