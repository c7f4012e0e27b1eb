"""Who is in each step's batch: the Poisson sampler the accountant assumes, the fixed schedule of canaries inserted
a set number of times (non-DP only), and the replay of the sampler that tells the audit how often each example
was drawn.

At every step each pool example is included independently with probability q (``poisson_rate``), from a
generator seeded by ``sampler_seed`` that draws nothing else (``poisson_draw``), so ``inclusion_counts`` can
replay the whole run from the seed alone, also after a resume.

User-level DP (``finetune.dp.unit: user``, ``user_batch``): the same sampler draws each *user* (unit) with
probability q, and of a sampled user with more than ``dp.rows_per_user`` rows that many are drawn from a second
stream (``user_rows_seed``), so the sampler itself still draws one uniform per unit per step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..shared.core.errors import ConfigError
from ..shared.core.seeds import stream


def secure_seed(world_size: int = 1) -> int:
    """128 bits of OS entropy (``finetune.dp.secure_rng``): a seed nobody can reproduce, for real deployments.
    Data-parallel (``world_size`` > 1): rank 0's, broadcast, so every rank holds the same one."""
    import secrets

    value = secrets.randbits(128)
    if world_size > 1:
        box = [value]
        torch.distributed.broadcast_object_list(box, src=0)
        value = box[0]
    return value


def poisson_rate(n: int, batch_size: int, sample_rate: float | None) -> float:
    """q: ``sample_rate``, else ``batch_size`` / ``n`` (the candidate pool); refused above 1."""
    q = sample_rate if sample_rate is not None else batch_size / n
    if not 0 < q <= 1:
        raise ConfigError(f"finetune.batch_size: {batch_size} examples per step out of n={n} gives q = {q:.3g} > 1")
    return q


def sampler_seed(secure: bool, seed: int, world_size: int) -> int:
    """The sampler's seed: from ``seed`` (``finetune.sampler`` stream), or with ``secure`` from OS entropy (rank 0's,
    broadcast, so every rank draws the same batches). A secure seed is never written anywhere."""
    return secure_seed(world_size) if secure else stream("finetune.sampler").int_seed(seed)


def poisson_draw(rng: np.random.Generator, n: int, q: float) -> np.ndarray:
    """One step's inclusion mask over the ``n`` pool examples (the sampler's only draw per step)."""
    return rng.random(n) < q


def units_of(users: Sequence) -> tuple[np.ndarray, list[np.ndarray]]:
    """User-level DP: (unit index of each pool example, the pool indices of each unit's rows), the units numbered in
    order of first appearance."""
    index: dict = {}
    unit = np.array([index.setdefault(u, len(index)) for u in users], dtype=np.int64)
    order = np.argsort(unit, kind="stable")  # pool order within each unit
    return unit, np.split(order, np.cumsum(np.bincount(unit, minlength=len(index)))[:-1]) if len(index) else []


def user_rows_seed(secure: bool, seed: int, world_size: int = 1) -> int:
    """The seed of the user-level row draw: ``finetune.user_rows`` of ``seed``, or with ``secure`` OS entropy."""
    return secure_seed(world_size) if secure else stream("finetune.user_rows").int_seed(seed)


def user_batch(rng: np.random.Generator, rows_rng: np.random.Generator, unit_rows: list[np.ndarray], q: float,
               cap: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """One user-level step: (the sampled units, each one's rows trained on). Each unit is included independently
    with probability q (``poisson_draw`` over the units: the sampler's only draw); of a sampled unit with more than
    ``cap`` rows, ``cap`` drawn without replacement from ``rows_rng`` (a stream of its own), in pool order."""
    sampled = np.flatnonzero(poisson_draw(rng, len(unit_rows), q))
    rows = []
    for u in sampled:
        r = unit_rows[u]
        rows.append(np.sort(rows_rng.choice(r, size=cap, replace=False)) if len(r) > cap else r)
    return sampled, rows


@dataclass
class UserSampler:
    """User-level DP's sampling state (``finetune.dp.unit: user``): the pool indices of each user's rows (users in order
    of first appearance), the row draw's generator and the steps that drew each user (both checkpointed)."""

    rows: list[np.ndarray]
    rows_rng: np.random.Generator
    counts: np.ndarray

    @classmethod
    def of(cls, users: Sequence | None, n: int, world_size: int, secure: bool, seed: int) -> "UserSampler":
        """``users``: the user of each of the ``n`` pool examples. Refused without a user per pool example or with
        more than one process."""
        if users is None or len(users) != n or any(u is None for u in users):
            raise ConfigError("finetune.dp.unit: user needs the user of every pool example (a dataset whose rows name "
                              "their user: enron_users, a text dataset with user_field or rows_per_user)")
        if world_size > 1:
            raise ConfigError("finetune.dp.unit: user-level DP runs in one process (distributed.nproc_per_node: 1)")
        rows = units_of(users)[1]
        return cls(rows, np.random.default_rng(user_rows_seed(secure, seed)), np.zeros(len(rows), dtype=np.int64))

    def draw(self, rng: np.random.Generator, q: float, cap: int) -> list[np.ndarray]:
        """One step's ``user_batch``: the rows of each sampled user (the users' counts updated)."""
        sampled, groups = user_batch(rng, self.rows_rng, self.rows, q, cap)
        self.counts[sampled] += 1
        return groups

    def state(self) -> dict:
        return {"user_rows": self.rows_rng.bit_generator.state, "unit_inclusions": self.counts.copy()}

    def restore(self, state: dict) -> None:
        self.rows_rng.bit_generator.state = state["user_rows"]
        self.counts = np.asarray(state["unit_inclusions"], dtype=np.int64).copy()


def user_chunks(groups: list[np.ndarray], max_batch: int) -> tuple[list[list[int]], list[np.ndarray]]:
    """A user-level step's chunks: whole users packed in draw order, at most ``max_batch`` rows each (a user has at
    most ``dp.rows_per_user`` <= ``max_batch``), and each chunk's unit of every row (0, 1, ... within the chunk)."""
    parts: list[list[int]] = []
    units: list[list[int]] = []
    for rows in groups:
        if not parts or len(parts[-1]) + len(rows) > max_batch:
            parts.append([])
            units.append([])
        unit = units[-1][-1] + 1 if units[-1] else 0
        parts[-1] += [int(i) for i in rows]
        units[-1] += [unit] * len(rows)
    return parts, [np.asarray(u, dtype=np.int64) for u in units]


def fixed_schedule(first: int, count: int, steps: int, repetitions: int, seed: int) -> dict[int, list[int]]:
    """step -> indices (``first`` .. ``first + count - 1``) of examples on a fixed schedule: each joins the
    batches of ``repetitions`` distinct steps drawn once, up front, from a stream separate from the sampler."""
    schedule: dict[int, list[int]] = {}
    srng = stream("finetune.schedule").numpy(seed)
    for j in range(count):
        for s in srng.choice(steps, size=min(repetitions, steps), replace=False):
            schedule.setdefault(int(s), []).append(first + j)
    return schedule


def inclusion_counts(n: int, sample_rate: float, steps: int, seed: int,
                     schedule: dict[int, list[int]] | None = None, total: int | None = None) -> np.ndarray:
    """Steps that sampled each example (Poisson part: ``n`` examples at rate q from ``default_rng(seed)``, as the
    loop draws them; plus the fixed ``schedule`` of examples ``n`` .. ``total - 1``)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(total or n, dtype=np.int64)
    for step in range(steps):
        counts[:n] += poisson_draw(rng, n, sample_rate)
        for i in (schedule or {}).get(step, []):
            counts[i] += 1
    return counts
