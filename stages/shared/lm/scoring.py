"""Batched log-probabilities of the labelled tokens of many examples (the attacks' hot path).

One forward per length-bucketed chunk; the output layer runs only at labelled positions. Returns,
per example, the log-probability of every labelled token in order, so each attack (loss, min-k%,
zlib, ...) reduces the same numbers differently instead of running the model again.
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from .batching import chunks, collate
from .examples import Example


def autocast(device):
    """bf16 (fp16 without bf16) autocast on CUDA for training; scoring never uses it."""
    if device.type == "cuda":
        dt = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast("cuda", dtype=dt)
    return contextlib.nullcontext()


def per_example_sums(values: torch.Tensor, owner: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(0, owner, values)


@torch.no_grad()
def token_logprobs(model, examples: Sequence[Example], pad_id: int, batch_size: int = 64,
                   desc: str | None = None, greedy: bool = False, candidates: Sequence | None = None):
    """log p(label_t | ids_<t) for every labelled position of every example (float32 arrays).

    With ``greedy=True`` also returns, per example, whether every labelled token is the argmax
    next token (i.e. greedy decoding from the unlabelled prefix reproduces the labels verbatim).

    With ``candidates`` (per example: an id array, or None) also returns, from the same forward pass, per example
    (``contrast_at`` rows of every labelled position against the other candidate tokens there, the unit hidden
    states at those positions).
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    lengths = [len(e) for e in examples]
    out: list[np.ndarray | None] = [None] * len(examples)
    hits: list[bool] = [False] * len(examples)
    extra: list[np.ndarray | None] = [None] * len(examples)
    parts = chunks(range(len(examples)), lengths, batch_size)
    for part in tqdm(parts, desc=desc, disable=desc is None, leave=False):
        batch = collate([examples[i] for i in part], pad_id, device)
        # fp32 on every device: bf16 moves the log-probability of unlikely tokens (where secrets live) by nats
        hidden, new_logits = model(batch["input_ids"], batch["attention_mask"])
        at = hidden[batch["rows"], batch["cols"]]
        logits = model.logits_at(hidden, new_logits, batch["rows"], batch["cols"]).float()
        lp = logits.log_softmax(-1).gather(-1, batch["targets"].unsqueeze(-1)).squeeze(-1).cpu().numpy()
        top = (logits.argmax(-1) == batch["targets"]).cpu().numpy()
        rows = batch["rows"].cpu().numpy()
        for j, i in enumerate(part):
            out[i] = lp[rows == j]
            hits[i] = bool(top[rows == j].all())
            if candidates is not None and candidates[i] is not None:
                sel = torch.as_tensor(np.flatnonzero(rows == j), device=device)
                h = at[sel].float()
                extra[i] = (contrast_at(model, logits[sel], h, batch["targets"][sel], candidates[i]),
                            (h / h.norm(dim=-1, keepdim=True).clamp(min=1e-12)).cpu().numpy())
    model.train(was_training)
    if candidates is not None:
        return out, extra
    return (out, hits) if greedy else out


#: columns of ``contrast_at``'s rows
CONTRAST_FIELDS = ("contrast", "spread", "hidden_norm", "init_contrast")


def contrast_at(model, logits: torch.Tensor, hidden: torch.Tensor, targets: torch.Tensor, cands) -> np.ndarray:
    """Per labelled position (rows of ``logits``/``hidden``), an array of ``CONTRAST_FIELDS``:

    * contrast: the target token's logit minus the mean logit of the other candidate tokens (a difference of
      log-probabilities: black-box readable);
    * spread: the standard deviation of the other candidates' logits at that position (black-box);
    * hidden_norm: the norm of the hidden state there (white-box);
    * init_contrast: the same contrast at this hidden state under the output rows the model started from
      (white-box): 0 for new tokens (their rows start equal), the frozen base head's rows for vocabulary tokens.
    """
    cands = torch.as_tensor(np.asarray(cands, dtype=np.int64), device=logits.device)
    out = np.zeros((len(targets), len(CONTRAST_FIELDS)), dtype=np.float64)
    vocab = model.base_vocab
    for r in range(len(targets)):
        t = targets[r]
        others = cands[cands != t]
        if len(others) == 0:
            continue
        z = logits[r, others]
        out[r, 0] = float(logits[r, t] - z.mean())
        out[r, 1] = float(z.std()) if len(others) > 1 else 0.0
        out[r, 2] = float(hidden[r].norm())
        if int(t) < vocab and bool((others < vocab).all()):  # every row started as the base head's
            w = model.head.weight
            out[r, 3] = float(hidden[r] @ (w[t].float() - w[others].float().mean(0)))
    return out


@torch.no_grad()
def output_rows(model, ids) -> torch.Tensor:
    """The output rows the model scores ``ids`` with (new-token rows, own secret rows, else the base head's), fp32."""
    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=model.head.weight.device)
    out = model.head.weight[ids.clamp(max=model.base_vocab - 1)].float().clone()
    if model.num_rows:
        row = model.row_index[ids.clamp(max=model.base_vocab - 1)].masked_fill(ids >= model.base_vocab, -1)
        has = row >= 0
        out[has] = model.row_head.weight[row[has]].float()
    if model.num_new:
        new = ids >= model.base_vocab
        out[new] = model.new_head.weight[ids[new] - model.base_vocab].float()
    return out
