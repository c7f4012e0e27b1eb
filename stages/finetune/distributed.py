"""Data-parallel fine-tuning on one machine through torch.distributed (``finetune.distributed``).

With ``nproc_per_node`` > 1 the stage relaunches itself under torchrun's launcher (as ``torchrun
--standalone``), so ``dvc repro``, the Prefect flow and a direct ``python -m stages.finetune`` all start it the
same way. Each process joins a gloo (CPU) or NCCL (one GPU per process) group; under DP, opacus' DPDDP
broadcasts rank 0's weights and its distributed optimizers sum the ranks' clipped gradients, with noise from
rank 0 only (``loop`` / ``dp``). Rank 0 alone evaluates and writes the run's outputs.
"""
from __future__ import annotations

import os
import sys
from typing import Sequence


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def launch(argv: Sequence[str], nproc: int, module: str = "stages.finetune", script: str | None = None) -> None:
    """Run ``python -m <module> argv`` (or ``python <script> argv``) in ``nproc`` processes, as ``torchrun
    --standalone`` does (through its launcher API: the torchrun command line would read the stage's ``--run`` as its
    own ``--run-path``). Raises torch's ChildFailedError naming the failed rank."""
    import uuid

    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=str(uuid.uuid4()),
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=1)
    # the workers split the cores (they inherit this environment); the caller's own environment is restored, or
    # every later process it starts (a dvc repro, a fine-tune) would run on 1 thread, with other float sums
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    try:
        entry = [script] if script else ["-m", module]
        elastic_launch(config, sys.executable)(*entry, *argv)
    finally:
        if before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = before


def init(device_pref: str):
    """Join the process group torchrun set up (no-op in a single process): (rank, world size, device)."""
    import torch
    import torch.distributed as dist

    from ..shared.lm.loading import pick_device

    device = pick_device(device_pref)
    if not under_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size(), device


def finish() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
