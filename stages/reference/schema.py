"""What a reference fine-tune writes (``<reference.out_dir>/<set>/``), read by the attack stage's RMIA.

``reference.json`` names the recipe the set was trained with (``recipe_of``: the run's fine-tune params without its
seed and where things run), so a set is used by every run of that recipe and dataset, and by no other.
"""
from __future__ import annotations

REFERENCE_RECORD = "reference.json"
REFERENCE_VERSION = 1

#: fine-tune params that choose how or where a run trains, or its random draws, not what it trains
NOT_RECIPE = ("seed", "device", "distributed", "checkpoint_every", "checkpoint_dir", "out_dir", "log_dir",
              "diagnostics", "external")


def recipe_of(params: dict) -> dict:
    """A run's recipe: its merged fine-tune params (as its run record holds them) without ``NOT_RECIPE``."""
    return {k: v for k, v in sorted(params.items()) if k not in NOT_RECIPE}
