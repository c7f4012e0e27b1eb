"""Sharded data parallelism (``finetune.distributed.strategy: fsdp``): FSDP2 through opacus.

Every module with weights is sharded with ``fully_shard`` by opacus' ``FSDP2Wrapper`` (parameters, gradients and
optimizer state split across the processes), and opacus' ghost_fsdp clipping (``privacy/strategies.py``) computes
each example's gradient norm from the layer's activations and output gradients, which are whole on every rank: the
clipping is over the full, unsharded per-example gradient. FSDP averages the ranks' clipped sums into each shard;
every rank draws the same noise (same generator state) and keeps its shard's part of it, so the noise is added once.

This module holds what sharding needs beyond the engine: the model's preparation (``untie_frozen``, ``shard``), the
equal number of chunks per step on every rank (``chunk_count``), the sharded checkpoint (torch.distributed.checkpoint,
``save_checkpoint`` / ``load_checkpoint``) and the gathering of the trained weights (``gather``, ``whole``).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from torch import nn

from ..shared.core.errors import ConfigError


def untie_frozen(model: nn.Module) -> None:
    """FSDP shards each module's parameters once: a frozen weight two modules share (a tied input embedding and
    output head) gets its own copy in the second module. A tied trainable weight is refused (opacus' ghost_fsdp
    clips no tied parameter)."""
    owners: dict[int, tuple[str, nn.Module, str]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        for pname, p in list(module.named_parameters(recurse=False)):
            if id(p) not in owners:
                owners[id(p)] = (name, module, pname)
                continue
            if p.requires_grad:
                raise ConfigError(f"finetune.distributed.strategy: fsdp cannot shard the tied trainable weight "
                                  f"{owners[id(p)][0]}.{owners[id(p)][2]} (also {name}.{pname}); use ddp")
            setattr(module, pname, nn.Parameter(p.detach().clone(), requires_grad=False))


def shard(model: nn.Module, device) -> nn.Module:
    """``model`` sharded in place by opacus' ``FSDP2Wrapper``: bf16 parameters with fp32 gradient reduction on
    CUDA (``MixedPrecisionPolicy``), fp32 on CPU."""
    from opacus.utils.fsdp_utils import FSDP2Wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy

    untie_frozen(model)
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if torch.device(device).type == "cuda" else MixedPrecisionPolicy())
    return FSDP2Wrapper(model, mp_policy=policy)


def is_sharded(t: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def whole(t: torch.Tensor | None) -> torch.Tensor | None:
    """The full tensor of a shard (a collective: every rank calls it), or ``t`` itself where it is not sharded."""
    if t is None:
        return None
    return t.full_tensor() if is_sharded(t) else t


def chunk_count(parts: int) -> int:
    """The most chunks any rank has this step (every rank runs that many: FSDP's gathers and reductions are
    collectives, so a rank with fewer chunks pads with zero-weight ones)."""
    n = torch.tensor([parts], dtype=torch.int64)
    torch.distributed.all_reduce(n, op=torch.distributed.ReduceOp.MAX)
    return int(n.item())


def _options(full: bool = False, strict: bool = True):
    """The trainable tensors only (frozen ones are the base model's); ``full``: gathered whole to rank 0's CPU.
    ``strict`` False when loading them back: the frozen tensors are absent by design, and ``dcp.load`` already
    refuses a checkpoint that lacks any trainable one."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, full_state_dict=full, cpu_offload=full, strict=strict)


def gather(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every trainable tensor of a sharded ``model``, whole, on rank 0's CPU (a collective; other ranks get {})."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = get_model_state_dict(model, options=_options(full=True))
    return state if torch.distributed.get_rank() == 0 else {}


def dcp_dir(path: Path) -> Path:
    """Where a run's sharded checkpoint lives: ``<run>.dcp`` beside its single-process ``<run>.pt``."""
    return path.with_suffix(".dcp")


def save_checkpoint(path: Path, model, optimizer, meta: dict) -> None:
    """Every rank writes its shards of the trainable weights and optimizer state (torch.distributed.checkpoint)
    into ``<run>.dcp``; rank 0 adds ``meta`` (step, log, sampler, noise generator and accountant states, the same
    on every rank). Written beside, then swapped in: a kill mid-save leaves the previous checkpoint whole."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    final = dcp_dir(path)
    tmp = final.with_name(final.name + ".tmp")
    if dist.get_rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    msd, osd = get_state_dict(model, optimizer, options=_options())
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(tmp))
    if dist.get_rank() == 0:
        torch.save(meta, tmp / "meta.pt")
        old = final.with_name(final.name + ".old")
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


def load_checkpoint(path: Path, model, optimizer, fingerprint: str) -> dict | None:
    """The checkpoint's ``meta`` with the shards loaded into ``model`` and ``optimizer``, or None where there is
    none for these inputs (every rank decides alike: they read the same files)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    final = dcp_dir(path)
    if not (final / "meta.pt").is_file():
        return None
    meta = torch.load(final / "meta.pt", map_location="cpu", weights_only=False)
    if meta.get("fingerprint") != fingerprint:
        return None
    msd, osd = get_state_dict(model, optimizer, options=_options())
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=str(final))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                   options=_options(strict=False))
    return meta
