"""Seeded group-level splits shared by the dataset readers."""
from __future__ import annotations

import numpy as np


def split_groups(groups: list, valid: float, test: float, seed: int) -> dict[str, set]:
    """Assign each distinct group (dialogue, author, message) to train/valid/test by a seeded shuffle.

    Sizes are round(n*valid) and round(n*test); the rest is train. Deterministic for a seed.
    """
    uniq = sorted(set(groups), key=lambda g: (str(type(g)), g))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(uniq))
    n_valid = int(round(len(uniq) * valid))
    n_test = int(round(len(uniq) * test))
    shuffled = [uniq[i] for i in order]
    return {
        "valid": set(shuffled[:n_valid]),
        "test": set(shuffled[n_valid:n_valid + n_test]),
        "train": set(shuffled[n_valid + n_test:]),
    }
