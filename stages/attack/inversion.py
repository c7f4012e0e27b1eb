"""Embedding inversion (privlm-bench App. B.3, after GEIA, Li et al. 2023): recover text from the
fine-tuned model's sentence embeddings.

The victim's sentence embedding is the mean of its last hidden states over the text's tokens. The
attacker trains a small decoder from scratch on auxiliary data (the dataset's valid split): an
alignment layer maps the embedding to the decoder's width and is fed as the first input position,
followed by the text's tokens, with the language-modelling loss on the text and an end token. At
evaluation it decodes greedily from the embeddings of unseen inference texts (the test split); the
score is token-level micro precision / recall / F1 between decoded and true token multisets.

Its baseline (``baseline_*``): the same decoder given each test text another test text's embedding (a cyclic shift,
so none its own): what its language prior and the embeddings' shared features recover without the text's own
embedding. F1 above the baseline is what the embedding of that very text gives away.

The attacker's vocabulary is the tokens seen in its auxiliary data (plus <unk>, <eos>): an attacker
can only emit tokens it knows, and the small output layer keeps CPU training to about a minute.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import torch
from torch import nn

from ..shared.core.seeds import stream
from ..shared.datasets import read_split, sample
from ..shared.lm.batching import collate
from ..shared.lm.examples import make_example, text_examples
from .registry import register_attack


@torch.no_grad()
def sentence_embeddings(model, examples, pad_id: int, batch_size: int) -> torch.Tensor:
    device = next(model.parameters()).device
    model.eval()
    out = []
    for s in range(0, len(examples), batch_size):
        b = collate(examples[s:s + batch_size], pad_id, device)
        ids = torch.cat([b["input_ids"], torch.full_like(b["input_ids"][:, :1], pad_id)], 1)
        mask = torch.cat([b["attention_mask"], torch.zeros_like(b["attention_mask"][:, :1])], 1)
        for i, e in enumerate(examples[s:s + batch_size]):  # the collate drops the last token: restore it
            ids[i, len(e) - 1] = int(e.ids[-1])
            mask[i, len(e) - 1] = 1
        hidden, _ = model(ids, mask)
        m = mask.unsqueeze(-1).to(hidden.dtype)
        out.append(((hidden * m).sum(1) / m.sum(1).clamp(min=1)).float().cpu())
    return torch.cat(out)


class Inverter(nn.Module):
    def __init__(self, emb_dim: int, vocab: int, width: int, layers: int, max_len: int):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=width * 2, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=max_len + 2,
                          tie_word_embeddings=True)
        self.lm = LlamaForCausalLM(cfg)
        self.align = nn.Linear(emb_dim, width)

    def forward(self, emb: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.align(emb).unsqueeze(1), self.lm.get_input_embeddings()(ids)], 1)
        m = torch.cat([mask[:, :1].new_ones(len(ids), 1), mask], 1)
        return self.lm(inputs_embeds=x, attention_mask=m).logits  # position 0 predicts ids[0]

    @torch.no_grad()
    def decode(self, emb: torch.Tensor, max_len: int, eos: int) -> list[list[int]]:
        out = torch.empty((len(emb), 0), dtype=torch.long)
        for _ in range(max_len):
            logits = self.forward(emb, out, torch.ones_like(out))[:, -1]
            out = torch.cat([out, logits.argmax(-1, keepdim=True)], 1)
        res = []
        for row in out.tolist():
            res.append(row[: row.index(eos)] if eos in row else row)
        return res


def prf(pred: list[list[int]], true: list[list[int]]) -> dict:
    """Token-level micro precision / recall / F1 over multisets."""
    hit = sum(sum((Counter(p) & Counter(t)).values()) for p, t in zip(pred, true))
    n_pred, n_true = sum(len(p) for p in pred), sum(len(t) for t in true)
    p = hit / n_pred if n_pred else 0.0
    r = hit / n_true if n_true else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}


def invert(emb_train, tok_train, emb_test, tok_test, params, seed: int = 0) -> dict:
    """Train an inverter on (embedding, tokens) pairs; decode the test embeddings; score them. The inverter's
    initialisation draws from torch's CPU generator seeded with ``seed``, forked so the caller's is untouched."""
    g = params.eia
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        vocab = {t: i + 2 for i, t in enumerate(sorted({t for s in tok_train for t in s}))}  # 0 = <eos>, 1 = <unk>
        train = [[vocab.get(t, 1) for t in s][: g.max_length] for s in tok_train]
        model = Inverter(emb_train.shape[1], len(vocab) + 2, g.width, g.layers, g.max_length + 1)
        losses = fit_inverter(model, emb_train, train, g, np.random.default_rng(seed))
        inv = {i: t for t, i in vocab.items()}
        decoded = [[inv[i] for i in s if i in inv] for s in model.decode(emb_test, g.max_length, eos=0)]
        shifted = [[inv[i] for i in s if i in inv] for s in model.decode(emb_test.roll(1, 0), g.max_length, eos=0)]
    true = [s[: g.max_length] for s in tok_test]
    return {**prf(decoded, true), **{f"baseline_{k}": v for k, v in prf(shifted, true).items()},
            "train_texts": len(train), "test_texts": len(true), "attacker_vocab": len(vocab),
            "final_loss": float(np.mean(losses[-10:]))}


def fit_inverter(model: Inverter, emb: torch.Tensor, train: list[list[int]], g,
                 rng: np.random.Generator) -> list[float]:
    """Teacher-forced LM loss on (embedding, tokens then <eos>) batches drawn with ``rng``; returns the losses."""
    opt = torch.optim.Adam(model.parameters(), lr=g.lr)
    losses = []
    for _ in range(g.steps):
        idx = rng.integers(0, len(train), min(g.batch_size, len(train)))
        seqs = [train[i] + [0] for i in idx]  # target: the tokens then <eos>
        L = max(len(s) for s in seqs)
        tgt = torch.full((len(seqs), L), -100)
        ids = torch.zeros((len(seqs), L - 1), dtype=torch.long)
        mask = torch.zeros((len(seqs), L - 1), dtype=torch.long)
        for b, s in enumerate(seqs):
            tgt[b, : len(s)] = torch.tensor(s)
            ids[b, : len(s) - 1] = torch.tensor(s[:-1])
            mask[b, : len(s) - 1] = 1
        logits = model(emb[idx], ids, mask)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@register_attack("eia", "inversion", ("text",),
                 "embedding inversion: a decoder trained on auxiliary sentence embeddings recovers unseen texts",
                 threat_model="sentence embeddings of the texts")
def eia(ctx, params) -> dict:
    g = params.eia
    tok = ctx.tokenizer
    model = ctx.target_model

    def texts(split, n, seed):  # the attacker's own draw of never-trained text (auxiliary and test splits)
        pairs = sample(ctx.dataset.pairs(read_split(ctx.where.processed, ctx.dataset, split)), n, seed)
        exs = text_examples(pairs, tok, ctx.setup.max_length, ctx.setup.objective)
        toks = [[int(t) for t in e.ids[e.labels != -100] if t != tok.eos_token_id][: g.max_length] for e in exs]
        toks = [t for t in toks if t]
        return [make_example([tok.eos_token_id], t, "nwp", "eia") for t in toks], toks

    aux_split = ctx.dataset.auxiliary_split
    aux_ex, aux_tok = texts(aux_split, g.aux_texts, stream("attack.eia.aux").int_seed(ctx.setup.seed))
    test_ex, test_tok = texts("test", g.test_texts, stream("attack.eia.test").int_seed(ctx.setup.seed))
    emb_aux = sentence_embeddings(model, aux_ex, tok.pad_token_id, params.batch_size)
    emb_test = sentence_embeddings(model, test_ex, tok.pad_token_id, params.batch_size)
    return {"attack": "eia", "victim": "fine-tuned", "aux_split": aux_split, "eval_split": "test",
            **invert(emb_aux, aux_tok, emb_test, test_tok, params, seed=g.seed)}
