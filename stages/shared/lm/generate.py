"""Batched, KV-cached sampling from a CanaryLM (any paradigm: the soft prompt or key/value prefix
is applied exactly as in training), used by VMR/AIR and the ACR search.

Prompts are left-padded; position ids are computed from the attention mask so every row sees its
own tokens at positions 0, 1, ... (after the soft prompt / prefix). Sampling follows the Hugging Face
defaults the papers use: temperature 1, top-k 50, top-p 1; ``temperature=0`` is greedy decoding.
"""
from __future__ import annotations

from typing import Sequence

import torch

from .scoring import autocast


def _filter(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, idx = torch.sort(logits, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs > top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)
    return logits


@torch.no_grad()
def generate(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, num_samples: int = 1,
             temperature: float = 1.0, top_k: int = 50, top_p: float = 1.0, seed: int = 0, pad_id: int = 0,
             batch_size: int = 32) -> list[list[list[int]]]:
    """``num_samples`` continuations of ``max_new_tokens`` tokens for every prompt -> [prompt][sample][token]."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    flat = [(i, list(p)) for i, p in enumerate(prompts) for _ in range(num_samples)]
    out: list[list[list[int]]] = [[] for _ in prompts]
    gen = torch.Generator(device=device).manual_seed(seed)
    n_soft, n_prefix = model.soft_prompt, model.prefix_len
    for s in range(0, len(flat), batch_size):
        chunk = flat[s:s + batch_size]
        B, T = len(chunk), max(len(p) for _, p in chunk)
        ids = torch.full((B, T), pad_id, dtype=torch.long, device=device)
        mask = torch.zeros((B, T), dtype=torch.long, device=device)
        for b, (_, p) in enumerate(chunk):
            ids[b, T - len(p):] = torch.tensor(p, device=device)
            mask[b, T - len(p):] = 1
        emb = model.embed_ids(ids)
        if n_soft:
            idx = torch.arange(n_soft, device=device).expand(B, -1)
            emb = torch.cat([model.prompt(idx).to(emb.dtype), emb], dim=1)
            mask = torch.cat([mask.new_ones(B, n_soft), mask], dim=1)
        cache = model._prefix_cache(B) if n_prefix else DynamicCache(config=model.config)
        full_mask = torch.cat([mask.new_ones(B, n_prefix), mask], dim=1) if n_prefix else mask
        pos = (mask.cumsum(-1) - 1).clamp(min=0) + n_prefix
        tokens = []
        with autocast(device):
            hidden = model.decoder(inputs_embeds=emb, attention_mask=full_mask, position_ids=pos,
                                   past_key_values=cache, use_cache=True)[0][:, -1:]
            last_pos = pos[:, -1:]
            for _ in range(max_new_tokens):
                new_logits = model.extra_logits(hidden)
                rows = torch.arange(B, device=device)
                logits = model.logits_at(hidden, new_logits, rows, torch.zeros_like(rows)).float()
                if temperature <= 0:
                    nxt = logits.argmax(-1)
                else:
                    probs = _filter(logits / temperature, top_k, top_p).softmax(-1)
                    nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
                tokens.append(nxt)
                full_mask = torch.cat([full_mask, full_mask.new_ones(B, 1)], dim=1)
                last_pos = last_pos + 1
                hidden = model.decoder(inputs_embeds=model.embed_ids(nxt[:, None]), attention_mask=full_mask,
                                       position_ids=last_pos, past_key_values=cache, use_cache=True)[0]
        gen_ids = torch.stack(tokens, 1).tolist() if tokens else [[] for _ in chunk]
        for (i, _), g in zip(chunk, gen_ids):
            out[i].append(g)
    model.train(was_training)
    return out
