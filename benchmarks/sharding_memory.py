"""Per-process memory of sharded DP fine-tuning (``finetune.distributed.strategy: fsdp``): one process, DDP and FSDP
at 2 processes, measured; and a model of the per-GPU memory for larger models on N GPUs.

Measured (default): full fine-tuning of the base model under DP-Adam (ghost clipping; ghost_fsdp when sharded), on
labelled-synthetic token sequences (uniform random ids, seeded: no data is read), q = 1, through ``loop.train``. After
every optimizer step each process counts the bytes of the tensors it holds: parameters (frozen ones included; a
shard where sharded), gradients (the noisy gradient and opacus' accumulated clipped sum) and optimizer state, and
keeps the largest; also its peak resident memory and the mean step time after the first step. Each configuration
runs alone (its processes split the cores), one after the other:

    python benchmarks/sharding_memory.py [--model data/models/base] [--steps 2] [--out results.json]

The memory model (``--memory-model``, no training) is arithmetic, not a measurement: per GPU, 4 bytes per parameter
(fp32 master weights) plus 16 per trainable parameter (gradient, opacus' clipped sum, two Adam moments); FSDP divides
that by N (a tied frozen embedding needs its own head copy there) and adds the largest decoder layer gathered whole
(its parameters and its gradient before the reduce-scatter, 8 bytes per parameter). Ghost clipping's per-example
norms are a few floats per example and layer (nothing beside these); activations come on top.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

CONFIGS = {"one process": (1, "ddp"), "DDP": (2, "ddp"), "FSDP": (2, "fsdp")}

#: (name, hidden, intermediate, layers, attention heads, kv heads, vocab, tied embeddings) of the modelled models
MODELS = [("SmolLM2-135M", 576, 1536, 30, 9, 3, 49152, True),
          ("Llama-3.2-1B", 2048, 8192, 16, 32, 8, 128256, True),
          ("Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128256, False)]


def local_bytes(t) -> int:
    from torch.distributed.tensor import DTensor

    t = t.to_local() if isinstance(t, DTensor) else t
    return t.numel() * t.element_size()


class Counter:
    """The largest per-process tensor bytes seen after an optimizer step (a global step post-hook)."""

    def __init__(self, model):
        self.model, self.peak, self.times = model, {}, []
        self.dp_optimizer = None  # opacus' optimizer (the FSDP one keeps its clipped sums in grad_state)

    def hook(self, opt, args, kwargs) -> None:
        if type(opt).__module__.startswith("opacus"):
            return
        self.times.append(time.perf_counter())
        params = sum(local_bytes(p) for p in self.model.parameters())
        grads = 0
        for p in self.model.parameters():
            if p.grad is not None:
                grads += local_bytes(p.grad)
            if getattr(p, "summed_grad", None) is not None:  # opacus' accumulated clipped sum
                grads += local_bytes(p.summed_grad)
        for state in getattr(self.dp_optimizer, "grad_state", {}).values():  # the FSDP optimizer keeps it here
            if state.get("summed_grad") is not None:
                grads += local_bytes(state["summed_grad"])
        optim = sum(local_bytes(v) for s in opt.state.values() for v in s.values() if hasattr(v, "element_size")
                    and v.dim() > 0)
        now = {"params": params, "grads": grads, "optimizer": optim}
        if sum(now.values()) > sum(self.peak.values() or [0]):
            self.peak = now


def worker(spec: dict, out: str) -> None:
    """One process of a configuration (or the single process): train, count, write rank 0's figures."""
    import numpy as np
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    import stages.finetune.loop as loop
    from stages.finetune.distributed import finish, init
    from stages.finetune.loop import TrainConfig, train
    from stages.finetune.params import DPParams
    from stages.shared.core.cli import configure_process
    from stages.shared.lm.examples import Example
    from stages.shared.lm.trainable import Trainable, build_model

    configure_process()
    rank, world_size, device = init("cpu")
    torch.manual_seed(0)
    model, tok = build_model(spec["model"], Trainable(paradigm="full", lora_r=1, lora_alpha=1, lora_dropout=0.0,
                                                      lora_targets=(), virtual_tokens=1, num_new_tokens=0,
                                                      new_token_init="mean", secret_rows=(), train_embeddings=False),
                             device)
    rng = np.random.default_rng(0)  # labelled synthetic: uniform random token ids
    ids = rng.integers(1, tok.vocab_size, size=(spec["examples"], spec["seq"]))
    pool = [Example(row.astype(np.int64), row.astype(np.int64), "synthetic") for row in ids]
    dp = DPParams(enabled=True, epsilon=8.0, delta=1e-5, max_grad_norm=1.0, accountant="prv",
                  grad_sample_mode="ghost", secure_rng=False, unit="example", rows_per_user=1)
    counter = Counter(model)
    real = loop.make_private

    def make_private(*args, **kwargs):  # where the FSDP optimizer keeps its clipped sums
        private = real(*args, **kwargs)
        counter.dp_optimizer = private.optimizer
        return private

    loop.make_private = make_private
    handle = register_optimizer_step_post_hook(counter.hook)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    start = time.perf_counter()
    try:
        train(model, pool, TrainConfig(steps=spec["steps"], batch_size=spec["examples"],
                                       physical_batch_size=spec["chunk"], lr=1e-4, weight_decay=0.0, clip_norm=1.0,
                                       seed=0, pad_id=tok.pad_token_id, dp=dp, sample_rate=1.0, optimizer="adam",
                                       population=spec["examples"], progress=False, sharding=spec["sharding"]))
    finally:
        handle.remove()
        loop.make_private = real
        finish()
    if rank != 0:
        return
    times = [start] + counter.times
    steps = [b - a for a, b in zip(times, times[1:])]
    result = {**{k: v / 2 ** 20 for k, v in counter.peak.items()}, "peak_rss_mb": resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024, "step_s": (sum(steps[1:]) / len(steps[1:])) if len(steps) > 1
        else steps[0], "world_size": world_size}
    result["total_mb"] = result["params"] + result["grads"] + result["optimizer"]
    result["trainable"] = trainable
    if rank == 0:
        Path(out).write_text(json.dumps(result))


def measure(args) -> list[dict]:
    import subprocess
    import tempfile

    from stages.finetune.distributed import launch

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (nproc, sharding) in CONFIGS.items():
            spec = {"model": args.model, "steps": args.steps, "examples": args.examples, "seq": args.seq,
                    "chunk": args.chunk, "sharding": sharding}
            path, out = Path(tmp) / f"{name}.json", Path(tmp) / f"{name}.out.json"
            path.write_text(json.dumps(spec))
            argv = ["--worker", str(path), str(out)]
            if nproc == 1:  # a fresh process (its own peak), on every core
                subprocess.run([sys.executable, __file__, *argv], check=True)
            else:
                launch(argv, nproc, script=__file__)
            rows.append({"config": name, "processes": nproc, **json.loads(out.read_text())})
            print(f"{name}: {rows[-1]['total_mb']:.1f} MiB per process (params {rows[-1]['params']:.1f}, grads "
                  f"{rows[-1]['grads']:.1f}, optimizer {rows[-1]['optimizer']:.1f})", flush=True)
    return rows


def layer_params(hidden: int, inter: int, heads: int, kv: int) -> int:
    head_dim = hidden // heads
    return 2 * hidden * hidden + 2 * hidden * kv * head_dim + 3 * hidden * inter + 2 * hidden


def memory_model(gpus=(2, 4, 8)) -> list[dict]:
    """Per-GPU GB (1e9 bytes) of parameters, gradients and optimizer state, full fine-tuning, DP-Adam, embeddings
    and head frozen (as the pipeline's full paradigm), DDP and FSDP on ``gpus`` GPUs."""
    rows = []
    for name, hidden, inter, layers, heads, kv, vocab, tied in MODELS:
        layer = layer_params(hidden, inter, heads, kv)
        embed = vocab * hidden
        total = embed * (1 if tied else 2) + layers * layer + hidden
        trainable = layers * layer + hidden
        ddp = 4 * total + 16 * trainable
        sharded_total = total + (embed if tied else 0)  # FSDP: a tied frozen head gets its own copy
        row = {"model": name, "parameters": total, "trainable": trainable, "ddp_gb": ddp / 1e9}
        for n in gpus:
            row[f"fsdp_{n}_gb"] = ((4 * sharded_total + 16 * trainable) / n + 8 * layer) / 1e9
        rows.append(row)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/base")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--examples", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=4)
    ap.add_argument("--out", default=None)
    ap.add_argument("--memory-model", action="store_true", help="print the per-GPU memory model only")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(json.loads(Path(args.worker[0]).read_text()), args.worker[1])
    if args.memory_model:
        rows = memory_model()
        print("| model | parameters | trainable | DDP per GPU | FSDP 2 / 4 / 8 GPUs per GPU |\n|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['model']} | {r['parameters'] / 1e9:.3g} B | {r['trainable'] / 1e9:.3g} B | "
                  f"{r['ddp_gb']:.1f} GB | {r['fsdp_2_gb']:.1f} / {r['fsdp_4_gb']:.1f} / {r['fsdp_8_gb']:.1f} GB |")
    else:
        rows = measure(args)
        one = rows[0]["total_mb"]
        print("| config | processes | params + grads + optimizer per process (MiB) | params | grads | optimizer | "
              "peak RSS (MiB) | step (s) |\n|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['config']} | {r['processes']} | {r['total_mb']:.1f} | {r['params']:.1f} | {r['grads']:.1f} | "
                  f"{r['optimizer']:.1f} | {r['peak_rss_mb']:.0f} | {r['step_s']:.1f} |")
        fsdp = next(r for r in rows if r["config"] == "FSDP")
        print(f"FSDP / one process, per process: {fsdp['total_mb'] / one:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
