"""Resumable training state: everything a resumed run needs to continue bit-for-bit (trainable weights,
optimizer moments, the sampler's and the noise generator's states, the accountant's history)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..shared.lm.examples import Example


def examples_fingerprint(examples: Sequence[Example]) -> str:
    h = hashlib.sha1()
    for e in examples:
        h.update(e.ids.tobytes())
        h.update(e.labels.tobytes())
    return h.hexdigest()


@dataclass
class Checkpointer:
    """A resumable training state on disk, valid only for the same inputs (``fingerprint``)."""

    path: Path
    every: int
    fingerprint: str

    def load(self) -> dict | None:
        if not self.path.is_file():
            return None
        state = torch.load(self.path, map_location="cpu", weights_only=False)
        return state if state.get("fingerprint") == self.fingerprint else None

    def save(self, state: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        torch.save({**state, "fingerprint": self.fingerprint}, tmp)
        os.replace(tmp, self.path)

    def clear(self) -> None:
        import shutil

        from .sharding import dcp_dir

        self.path.unlink(missing_ok=True)
        sharded = dcp_dir(self.path)  # and what a save killed midway left beside it
        for d in (sharded, sharded.with_name(sharded.name + ".tmp"), sharded.with_name(sharded.name + ".old")):
            shutil.rmtree(d, ignore_errors=True)

    def due(self, step: int, steps: int) -> bool:
        """Save after ``step`` (1-based) steps? Every ``every`` steps, never after the last one."""
        return bool(self.every) and step % self.every == 0 and step < steps


def snapshot(step: int, log: list, model, opt, sampler: np.random.Generator, noise: torch.Generator | None,
             accountant) -> dict:
    """The training state; ``model`` None: a sharded run, whose weights and optimizer state
    torch.distributed.checkpoint saves (``sharding.save_checkpoint``)."""
    return {"step": step, "log": log,
            "trainable": None if model is None else {k: v.detach().cpu().clone() for k, v in model.named_parameters()
                                                     if v.requires_grad},
            "optimizer": None if model is None else opt.state_dict(), "sampler": sampler.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
            "noise_rng": noise.get_state() if noise is not None else None,
            "accountant": list(accountant.history) if accountant is not None else None}


def restore(state: dict, model, opt, sampler: np.random.Generator, noise: torch.Generator | None,
            accountant) -> tuple[list, int]:
    """Put a snapshot back in place; returns (log so far, steps done). ``model`` None: a sharded run's weights
    and optimizer state are already loaded (``sharding.load_checkpoint``)."""
    if model is not None:
        named = dict(model.named_parameters())
        with torch.no_grad():
            for k, v in state["trainable"].items():
                named[k].copy_(v)
        opt.load_state_dict(state["optimizer"])
    sampler.bit_generator.state = state["sampler"]
    torch.set_rng_state(state["torch_rng"])
    if noise is not None:
        noise.set_state(state["noise_rng"])
    if accountant is not None:
        accountant.history = list(state["accountant"])
    return state["log"], state["step"]
