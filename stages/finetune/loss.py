"""The training loss: each example's mean token NLL over its labelled positions, on the CanaryLM inside whatever
wraps it (opacus' GradSampleModule, DPDDP). Used by the loop, the DP step and the gradient diagnostics."""
from __future__ import annotations

import torch

from ..shared.lm.scoring import per_example_sums


def unwrap(model):
    """The CanaryLM inside opacus' wrappers (GradSampleModule ``_module``, DPDDP ``module``)."""
    while not hasattr(model, "logprobs_at"):
        model = getattr(model, "_module", None) or model.module
    return model


def per_sample_losses(model, batch) -> torch.Tensor:
    """Mean token NLL of each example in the chunk over its labelled positions -> (B,)."""
    hidden, new_logits = model(batch["input_ids"], batch["attention_mask"])
    inner = unwrap(model)
    lp = inner.logprobs_at(hidden, new_logits, batch["rows"], batch["cols"], batch["targets"])
    B = batch["batch_size"]
    nll = per_example_sums(-lp, batch["rows"], B)
    count = per_example_sums(torch.ones_like(lp), batch["rows"], B).clamp(min=1)
    return nll / count
