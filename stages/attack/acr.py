"""Adversarial compression ratio (Schwarzschild et al. 2024; empirical-privacy-variance App. B.7).

ACR(s) = |s| / |p*| in characters, where p* is the shortest prompt found after which the model's
greedy continuation is exactly s. p* is searched with Greedy Coordinate Gradient (GCG, Zou et al.
2023): for prompt lengths 1, 2, ..., at each iteration take the gradient of the target's loss with
respect to the one-hot prompt tokens, draw candidate single-token swaps among the top-k tokens per
position, keep the best candidate, and stop once greedy decoding reproduces s. Each secret has a
time budget; a secret with no prompt found within it gets ACR 0. Expensive: off by default on CPU.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from .memorization import memorization_table, select_secrets
from .registry import register_attack


def _target_loss(model, prompt_emb: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-candidate CE of the target given the prompt embeddings (C, L, d); also whether greedy matches."""
    C = prompt_emb.shape[0]
    tgt_emb = model.embed_ids(target[:-1].expand(C, -1)) if len(target) > 1 else prompt_emb[:, :0]
    hidden, new_logits = model.forward_embeds(torch.cat([prompt_emb, tgt_emb.to(prompt_emb.dtype)], 1))
    L, T = prompt_emb.shape[1], len(target)
    rows = torch.arange(C, device=target.device).repeat_interleave(T)
    cols = (L - 1 + torch.arange(T, device=target.device)).repeat(C)
    logits = model.logits_at(hidden, new_logits, rows, cols).float()
    tgt = target.repeat(C)
    loss = torch.nn.functional.cross_entropy(logits, tgt, reduction="none").view(C, T).mean(1)
    greedy = (logits.argmax(-1) == tgt).view(C, T).all(1)
    return loss, greedy


def gcg_shortest_prompt(model, target_ids: list[int], allowed: torch.Tensor, *, max_prompt_tokens: int, top_k: int,
                        candidates: int, seconds: float, seed: int = 0) -> list[int] | None:
    """Shortest prompt (token ids) found whose greedy continuation is ``target_ids``, or None."""
    device = next(model.parameters()).device
    target = torch.tensor(target_ids, device=device)
    W = model.embed.weight  # base vocabulary rows; prompts use ordinary tokens only
    rng = np.random.default_rng(seed)
    start = time.time()
    for L in range(1, max_prompt_tokens + 1):  # shortest first; length L may run until its share ends
        length_deadline = start + seconds * L / max_prompt_tokens
        prompt = torch.tensor(rng.choice(allowed.cpu().numpy(), L), device=device)
        while time.time() < length_deadline:
            one_hot = torch.zeros(L, W.shape[0], device=device, dtype=W.dtype)
            one_hot[torch.arange(L), prompt] = 1
            one_hot.requires_grad_(True)
            loss, greedy = _target_loss(model, (one_hot @ W).unsqueeze(0), target)
            if bool(greedy[0]):
                return prompt.tolist()
            (grad,) = torch.autograd.grad(loss.sum(), one_hot)
            grad = grad[:, allowed]
            top = allowed[(-grad).topk(min(top_k, len(allowed)), dim=1).indices]  # (L, k)
            with torch.no_grad():
                cand = prompt.repeat(candidates, 1)
                pos = torch.as_tensor(rng.integers(0, L, candidates), device=device)
                pick = torch.as_tensor(rng.integers(0, top.shape[1], candidates), device=device)
                cand[torch.arange(candidates), pos] = top[pos, pick]
                c_loss, c_greedy = _target_loss(model, model.embed(cand), target)
                if c_greedy.any():
                    return cand[int(c_greedy.nonzero()[0])].tolist()
                prompt = cand[int(c_loss.argmin())]
    return None


def acr_of(model, tok, text: str, allowed: torch.Tensor, params) -> float:
    a = params.acr
    ids = tok(text, add_special_tokens=False)["input_ids"][: a.max_target_tokens]
    prompt = gcg_shortest_prompt(model, ids, allowed, max_prompt_tokens=a.max_prompt_tokens, top_k=a.top_k,
                                 candidates=a.candidates, seconds=a.seconds_per_secret, seed=a.seed)
    if prompt is None:
        return 0.0
    return len(tok.decode(ids)) / max(1, len(tok.decode(prompt)))


@register_attack("acr", "memorization", ("secrets:text",),
                 "adversarial compression ratio: |s| / |shortest prompt eliciting s| found by GCG in a time budget",
                 threat_model="white-box gradients (prompt search)")
def acr(ctx, params) -> object:
    tok = ctx.tokenizer
    secrets, trained = select_secrets(ctx, params, None)
    secrets, trained = secrets[: params.acr.max_secrets], trained[: params.acr.max_secrets]
    special = set(tok.all_special_ids)
    allowed = torch.tensor([i for i in range(ctx.target_model.base_vocab) if i not in special],
                           device=next(ctx.target_model.parameters()).device)
    score = [acr_of(ctx.target_model, tok, s["value"], allowed, params) for s in secrets]
    base = [acr_of(ctx.reference_model, tok, s["value"], allowed, params) for s in secrets]
    return memorization_table(secrets, trained, score, base)
