"""Attacks behind a registry. Each maps per-token log-probabilities (computed once per model and
example by stages.training.scoring) to one score per canary; higher = more likely a member."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..registry import Registry


@dataclass(frozen=True)
class Attack:
    name: str
    #: per-example labelled-token log-probs -> scores (higher = member)
    score: Callable[[Sequence[np.ndarray]], np.ndarray]
    description: str = ""


ATTACKS: Registry[Attack] = Registry("attack")


def register_attack(name: str, description: str = ""):
    def deco(fn):
        ATTACKS.register(name)(Attack(name, fn, description))
        return fn

    return deco


@register_attack("loss", "Yeom et al. 2018: mean log-probability of the labelled tokens "
                 "(SFT: the secret given its prefix; NWP: the whole canary)")
def loss_scores(token_lps: Sequence[np.ndarray]) -> np.ndarray:
    return np.array([float(np.mean(x)) if len(x) else float("nan") for x in token_lps], dtype=np.float64)
