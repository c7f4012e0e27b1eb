"""Who is in each step's batch: the Poisson sampler the accountant assumes, the fixed schedule of canaries inserted
a set number of times (non-DP only), and the replay of the sampler that tells the audit how often each example
was drawn.

At every step each pool example is included independently with probability q (``poisson_rate``), from a
generator seeded by ``sampler_seed`` that draws nothing else (``poisson_draw``), so ``inclusion_counts`` can
replay the whole run from the seed alone, also after a resume.
"""
from __future__ import annotations

import numpy as np
import torch

from ..core.errors import ConfigError
from ..core.seeds import stream


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
