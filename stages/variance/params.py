"""Params of the empirical-privacy-variance study (the ``variance`` section): the sweep the Prefect flow runs
(``variance.sweep``, read by flows/variance.py) and the analysis stage (the rest, read by ``python -m
stages.variance``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..core.params import check


@dataclass(frozen=True)
class GridParams:
    """The hyperparameter grid (every combination is one configuration, each calibrated to every epsilon)."""

    batch_size: tuple[int, ...]
    steps: tuple[int, ...]
    lr: tuple[float, ...]

    def problems(self):
        return (check(len(self.batch_size) > 0 and all(b > 0 for b in self.batch_size), "batch_size",
                      "needs at least one value, each > 0", self.batch_size)
                + check(len(self.steps) > 0 and all(t > 0 for t in self.steps), "steps",
                        "needs at least one value, each > 0", self.steps)
                + check(len(self.lr) > 0 and all(x > 0 for x in self.lr), "lr", "needs at least one value, each > 0",
                        self.lr))


@dataclass(frozen=True)
class ClusterParams:
    """Where the points run: a Dask scheduler address, or (null) a LocalCluster of this many worker processes. A
    worker runs one point at a time; ``threads_per_worker`` is that point's torch/OMP thread count."""

    address: str | None
    workers: int
    threads_per_worker: int

    def problems(self):
        return (check(self.workers > 0, "workers", "must be > 0", self.workers)
                + check(self.threads_per_worker > 0, "threads_per_worker", "must be > 0", self.threads_per_worker))


@dataclass(frozen=True)
class SweepParams:
    """One DVC experiment per (epsilon, configuration, seed), each run in its own clone on a Dask worker."""

    name: str
    epsilons: tuple[float, ...]
    delta: float | None              # null: each run's own default delta = n^-1.1
    grid: GridParams
    seeds: tuple[int, ...]
    run: dict[str, Any]              # finetune overrides shared by every point (deep-merged over `finetune`)
    attacks: tuple[str, ...]         # the attacks each point runs (its attack.runs entry)
    targets: tuple[str, ...]         # the DVC stages each experiment reproduces (with their upstream)
    cluster: ClusterParams
    retries: int                     # a failed point is retried this many times, then recorded as failed
    diverged_loss: float             # a point whose validation loss is above this (or not finite) is recorded as failed
    work_dir: str                    # local default remotes live here (gitignored)
    git_remote: str | None           # null: a bare repo <work_dir>/remote.git created by the flow
    dvc_remote: str | None           # null: a local DVC remote <work_dir>/dvc-remote created by the flow
    worker_dir: str | None           # where a worker makes its clones; null: a temporary directory on the worker
    keep_clones: bool

    def problems(self):
        return (check(bool(self.name.strip()) and self.name.replace("-", "").replace("_", "").isalnum(), "name",
                      "must be letters, digits, - or _", self.name)
                + check(len(self.epsilons) > 0 and all(e > 0 for e in self.epsilons), "epsilons",
                        "needs at least one value, each > 0", self.epsilons)
                + check(self.delta is None or 0 < self.delta < 1, "delta", "must be null or in (0, 1)", self.delta)
                + check(len(self.seeds) > 0 and len(set(self.seeds)) == len(self.seeds), "seeds",
                        "needs at least one, no repeats", self.seeds)
                + check(len(self.attacks) > 0, "attacks", "needs at least one attack", self.attacks)
                + check(len(self.targets) > 0, "targets", "needs at least one DVC stage", self.targets)
                + check(self.retries >= 0, "retries", "must be >= 0", self.retries)
                + check(self.diverged_loss > 0, "diverged_loss", "must be > 0", self.diverged_loss)
                + check(not {"batch_size", "steps", "lr", "seed", "dp"} & set(self.run), "run",
                        "must not set batch_size, steps, lr, seed or dp (the sweep sets them per point)",
                        sorted(set(self.run))))


@dataclass(frozen=True)
class VarianceParams:
    """The analysis stage: reads the sweep table, writes the analysis (JSON) and its plots."""

    table: str                       # the sweep table flows/variance.py writes (git-tracked; this stage's input)
    out_dir: str
    measure: Literal["vmr", "air"]   # the empirical privacy score (a memorization attack every point runs)
    primary: Literal["mean", "max"]  # mean (section 3) or max (worst case, App. F) over the curated secrets
    min_points: int                  # fewer completed points at an epsilon: regressions are skipped
    #: the control test's level (Bonferroni over the target epsilons), fixed before the points: regressions,
    #: heuristic accuracies and the Algorithm-1 selection of a statistic are computed only where it passes
    control_alpha: float
    sweep: SweepParams

    def problems(self):
        return (check(self.min_points >= 3, "min_points", "must be >= 3", self.min_points)
                + check(0 < self.control_alpha < 1, "control_alpha", "must be in (0, 1)", self.control_alpha))
