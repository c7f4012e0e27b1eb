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
                   desc: str | None = None, greedy: bool = False):
    """log p(label_t | ids_<t) for every labelled position of every example (float32 arrays).

    With ``greedy=True`` also returns, per example, whether every labelled token is the argmax
    next token (i.e. greedy decoding from the unlabelled prefix reproduces the labels verbatim).
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    lengths = [len(e) for e in examples]
    out: list[np.ndarray | None] = [None] * len(examples)
    hits: list[bool] = [False] * len(examples)
    parts = chunks(range(len(examples)), lengths, batch_size)
    for part in tqdm(parts, desc=desc, disable=desc is None, leave=False):
        batch = collate([examples[i] for i in part], pad_id, device)
        # fp32 on every device: bf16 moves the log-probability of unlikely tokens (where secrets live) by nats
        hidden, new_logits = model(batch["input_ids"], batch["attention_mask"])
        logits = model.logits_at(hidden, new_logits, batch["rows"], batch["cols"]).float()
        lp = logits.log_softmax(-1).gather(-1, batch["targets"].unsqueeze(-1)).squeeze(-1).cpu().numpy()
        top = (logits.argmax(-1) == batch["targets"]).cpu().numpy()
        rows = batch["rows"].cpu().numpy()
        for j, i in enumerate(part):
            out[i] = lp[rows == j]
            hits[i] = bool(top[rows == j].all())
    model.train(was_training)
    return (out, hits) if greedy else out
