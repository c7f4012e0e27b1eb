"""The attacks' scoring pass: per labelled token, what every membership score reads, from one forward pass.

Per example and labelled position: the token's log-probability, whether it is the model's top-1 token there (EZ-MIA's
error positions), and the mean and standard deviation of log p(z) over the vocabulary under the model's own
next-token distribution, E_z[log p(z)] and sd_z[log p(z)] with z ~ p (Min-K%++'s standardisation). With
``candidates`` also the contrast rows of ``lm.scoring.contrast_at`` and the unit hidden states. At least fp32 on every
device (a float64 model, as in the tests, stays float64).

The fine-tune's utility evaluation keeps ``lm.scoring.token_logprobs`` (log-probabilities only); this module adds
the vocabulary statistics the attacks need without a second forward pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from .batching import chunks, collate
from .examples import Example
from .scoring import contrast_at


@dataclass(frozen=True)
class TokenScores:
    """One example's labelled positions under one model (arrays of equal length, in order)."""

    logprobs: np.ndarray  # log p(label_t | ids_<t) (the pass's dtype: float32, float64 for a float64 model)
    top1: np.ndarray  # bool: the label is the model's argmax there
    vocab_mean: np.ndarray | None  # E_{z~p}[log p(z)] at that position (minus the entropy); None: not computed
    vocab_sd: np.ndarray | None  # sd_{z~p}[log p(z)]; None: not computed


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


def vocab_moments(lsm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, sd) of log p(z) under z ~ p, per row of the log-softmax ``lsm``: two matrix-vector reductions and one
    centred temporary (about 3x the log-softmax's own time on a CPU; an unfused version took 5x)."""
    p = lsm.exp()
    mean = torch.einsum("ij,ij->i", p, lsm)
    var = torch.einsum("ij,ij->i", p, (lsm - mean.unsqueeze(-1)).square_())
    return mean, var.clamp(min=0).sqrt()


@torch.no_grad()
def score_tokens(model, examples: Sequence[Example], pad_id: int, batch_size: int = 64, desc: str | None = None,
                 candidates: Sequence | None = None, moments: bool = True) -> tuple[list[TokenScores], list]:
    """(per example its ``TokenScores``, per example its contrast extras or None): one forward pass per
    length-bucketed chunk, the output layer only at labelled positions. ``moments=False`` leaves the vocabulary
    moments out (None): only the fine-tuned model's are read (Min-K%++)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[TokenScores | None] = [None] * len(examples)
    extra: list = [None] * len(examples)
    for part in tqdm(chunks(range(len(examples)), [len(e) for e in examples], batch_size), desc=desc,
                     disable=desc is None, leave=False):
        batch = collate([examples[i] for i in part], pad_id, device)
        hidden, new_logits = model(batch["input_ids"], batch["attention_mask"])
        logits = at_least_fp32(model.logits_at(hidden, new_logits, batch["rows"], batch["cols"]))
        lsm = logits.log_softmax(-1)
        targets = batch["targets"]
        lp = lsm.gather(-1, targets.unsqueeze(-1)).squeeze(-1).cpu().numpy()
        top = (logits.argmax(-1) == targets).cpu().numpy()
        mu, sigma = (m.cpu().numpy() for m in vocab_moments(lsm)) if moments else (None, None)
        rows = batch["rows"].cpu().numpy()
        for j, i in enumerate(part):
            sel = rows == j
            out[i] = TokenScores(lp[sel], top[sel], *((mu[sel], sigma[sel]) if moments else (None, None)))
            if candidates is not None and candidates[i] is not None:
                at = torch.as_tensor(np.flatnonzero(sel), device=device)
                h = at_least_fp32(hidden[batch["rows"][at], batch["cols"][at]])
                extra[i] = (contrast_at(model, logits[at], h, targets[at], candidates[i]),
                            (h / h.norm(dim=-1, keepdim=True).clamp(min=1e-12)).cpu().numpy())
    model.train(was_training)
    return out, extra
