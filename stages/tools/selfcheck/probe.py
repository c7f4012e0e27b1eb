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

``TransformerProbe`` puts each canary's own coordinates behind a transformer: canary i is a sequence of
``length`` tokens in which its own token appears at every other position, read through a frozen, randomly
initialised Llama decoder layer (attention + MLP, RMSNorm); its own coordinates are that token's input-embedding
row (whose gradient flows back through the attention and the MLP) and its output row i of an ``nn.Linear``
(d -> m), which reads every labelled position. Both sum over positions, so a per-example norm needs the
cross-position terms (ghost's Gram matrices, book-keeping's sums). Its first positions are a masked prompt (label
-100, as in every SFT example), so the loss is a mean over the labelled positions only. The gradient direction now
depends on the weights: the self-check reads it at every step.

Every trainable tensor but lora_A has the canaries along its first axis, so canary i's coordinates are
``p[i]`` for each of them (``own_parameters``). The per-example gradient is then a constant vector (``scale``
times a fixed direction) in those coordinates: each step moves them by the clipped gradient when i is in the
batch, plus noise. This is the linear model the self-check's statistic reads (``trials.py``). The modules are
the layer types the fine-tune trains, wrapped and clipped by the same opacus code (and, for RMSNorm, the
project's own grad and norm samplers).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ...shared.core.seeds import Stream
from ...shared.lm.examples import IGNORE, Example

#: the probe's random streams, derived from the self-check's seed as the pipeline's are (``core/seeds.py``:
#: SeedSequence(seed, spawn key = the name)), so no two of them are one stream: the modules' weights (torch's RNG:
#: ``trials.train_probe`` seeds it, and the transformer probe's decoder and rows), peft's LoRA initialisation, and
#: the linear probe's canary directions (``x0``, ``a_rows``, ``a_embed``)
INIT = Stream("selfcheck.probe.init", "the probe's weight initialisation: torch's RNG (selfcheck.seed)")
LORA_INIT = Stream("selfcheck.probe.lora", "peft's LoRA initialisation in the linear probe (selfcheck.seed)")
DIRECTIONS = Stream("selfcheck.probe.directions", "the linear probe's canary directions (selfcheck.seed)")

PARADIGMS = ("rows", "lora", "full", "train_embeddings")
#: probe models: the linear one (``ProbeLM``, each paradigm) and the transformer one (``TransformerProbe``, rows)
PROBES = ("linear", "transformer")


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
        gen = torch.Generator().manual_seed(DIRECTIONS.int_seed(seed))
        unit = lambda: nn.functional.normalize(torch.randn(d, generator=gen), dim=0)  # noqa: E731
        self.register_buffer("x0", unit())  # the constant input of the Linear layers
        self.register_buffer("a_rows", unit())  # what s_i reads from an embedding row
        self.new_embed = nn.Embedding(m, d)
        self.new_head = nn.Linear(d, m, bias=False)
        if paradigm == "lora":
            from peft import LoraConfig, inject_adapter_in_model

            self.decoder = _Decoder(d, m)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(LORA_INIT.int_seed(seed))
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

    def examples(self) -> list:
        """Canary i: the input token i, one labelled position."""
        return [Example(np.array([i, 0], dtype=np.int64), np.array([IGNORE, 0], dtype=np.int64), "canary:probe")
                for i in range(self.m)]

    def own_scores(self, start: int, stop: int) -> torch.Tensor:
        """s of canaries ``start`` .. ``stop`` - 1 (their loss is -scale * s): the training forward pass."""
        return self.forward(torch.arange(start, stop).unsqueeze(1))[0][:, 0]


class TransformerProbe(nn.Module):
    """Canary i: ``length`` tokens, base tokens at even positions and its own token (id ``BASE + i``) at odd ones,
    through a frozen random Llama decoder; s_i = the mean over its labelled positions (all but the first ``PROMPT``)
    of output i of ``new_head``. Own coordinates: ``new_embed`` row i (behind the decoder) and ``new_head`` row i.
    Same interface as ``ProbeLM``."""

    BASE = 8  # base vocabulary (frozen embeddings)
    #: the first positions are a prompt, masked (label -100) as an SFT example's prompt is: the loss is the mean over
    #: the other positions, so a loss that averages over masked positions too has the wrong per-example norm
    PROMPT = 2

    def __init__(self, m: int, *, d: int = 16, length: int = 6, scale: float = 100.0, seed: int = 0):
        super().__init__()
        from transformers import LlamaConfig, LlamaModel

        self.m, self.d, self.length, self.scale, self.paradigm = int(m), int(d), int(length), float(scale), "rows"
        self.keep_input = False
        self.last_input: torch.Tensor | None = None
        config = LlamaConfig(vocab_size=self.BASE, hidden_size=d, intermediate_size=2 * d, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=length + 1,
                             tie_word_embeddings=False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(INIT.int_seed(seed))
            self.decoder = LlamaModel(config)
            self.decoder.requires_grad_(False)
            self.new_embed = nn.Embedding(m, d)
            self.new_head = nn.Linear(d, m, bias=False)
            with torch.no_grad():  # own rows start random: the embedding's gradient (through the head) is not 0
                self.new_embed.weight.normal_(0, 1)
                self.new_head.weight.normal_(0, 1 / d ** 0.5)

    def own_parameters(self) -> dict[str, nn.Parameter]:
        return {n: p for n, p in self.named_parameters() if p.requires_grad}

    def sequences(self, canaries: torch.Tensor) -> torch.Tensor:
        """(B, length) token ids of canaries ``canaries`` (B,): base token k at even positions, BASE + i at odd."""
        pos = torch.arange(self.length)
        base = (pos // 2) % self.BASE
        return torch.where(pos % 2 == 1, self.BASE + canaries.unsqueeze(1), base.expand(len(canaries), -1))

    def hidden(self, input_ids: torch.Tensor) -> torch.Tensor:
        is_new = input_ids >= self.BASE
        emb = torch.where(is_new.unsqueeze(-1), self.new_embed((input_ids - self.BASE).clamp(min=0)),
                          self.decoder.embed_tokens(input_ids.clamp(max=self.BASE - 1)))
        if self.keep_input and torch.is_grad_enabled():
            emb = emb if emb.requires_grad else emb.detach().requires_grad_(True)
            self.last_input = emb  # as CanaryLM: the ghost norm pass stops at the decoder's input embeddings
        return self.decoder(inputs_embeds=emb, use_cache=False)[0]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        """(own logit at every position (B, length), None): column i of ``new_head`` for canary i."""
        ids = input_ids[:, :self.length]
        own = (ids[:, 1] - self.BASE).unsqueeze(1).expand(-1, self.length)
        return self.new_head(self.hidden(ids)).gather(2, own.unsqueeze(2))[..., 0], None

    def logprobs_at(self, hidden, new_logits, rows, cols, targets) -> torch.Tensor:
        return self.scale * hidden[rows, cols].float()

    def examples(self) -> list:
        """Canary i: its sequence plus one token, its positions labelled but the first ``PROMPT``."""
        seqs = self.sequences(torch.arange(self.m)).numpy()
        labels = np.array([IGNORE] * (1 + self.PROMPT) + [0] * (self.length - self.PROMPT), dtype=np.int64)
        return [Example(np.concatenate([s, [0]]).astype(np.int64), labels, "canary:probe") for s in seqs]

    def own_scores(self, start: int, stop: int) -> torch.Tensor:
        """s of canaries ``start`` .. ``stop`` - 1: the mean own logit over the labelled positions (row i of the head
        read directly instead of the whole (d -> m) output; the same function of the own coordinates)."""
        idx = torch.arange(start, stop)
        h = self.hidden(self.sequences(idx))[:, self.PROMPT:]
        return (h * self.new_head.weight[idx].unsqueeze(1)).sum(-1).mean(1)


def build_probe(probe: str, m: int, paradigm: str, *, width: int, scale: float, seed: int) -> nn.Module:
    """The self-check's probe model: ``linear`` (``ProbeLM``, ``width`` = d) or ``transformer`` (rows only)."""
    if probe == "transformer":
        if paradigm != "rows":
            raise ValueError(f"the transformer probe trains its own rows only (paradigm 'rows'), not {paradigm!r}")
        return TransformerProbe(m, scale=scale, seed=seed)
    return ProbeLM(m, paradigm, d=width, scale=scale, seed=seed)
