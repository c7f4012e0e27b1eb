"""DP / non-DP cost of a fine-tuning step on the default model, measured in one process.

For LoRA, full fine-tuning and full fine-tuning with the embeddings (``train_embeddings``), the same
Poisson-sampled batches of the default training set (PersonaChat rows + member canaries) are trained
without DP, with opacus DP-SGD in hooks mode (per-example gradients), in ghost mode (ghost clipping) and in
bk mode (book-keeping: ghost's norms, the clipped sum from the same backward pass);
we report the mean step time after a warm-up step, the peak resident memory during each configuration
(sampled every 5 ms from /proc/self/status) and the DP / non-DP ratios. One command measures them all;
each configuration trains in a fresh child process, so that no peak carries into the next one.

    python benchmarks/dp_overhead.py [--steps 6] [--full-steps 4] [--only full] [--nproc 2]

``--nproc N`` also trains the LoRA DP-bk configuration data-parallel in N processes under torchrun
(gloo on CPU, NCCL on GPUs; the cores split between them on CPU) and compares its tokens/s with the
single process's.

Needs the base model, canaries and processed PersonaChat: `dvc repro canaries preprocess@personachat`.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import threading
import time
from pathlib import Path


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class PeakRSS:
    def __enter__(self):
        self.peak, self._stop = rss_mb(), False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop:
            self.peak = max(self.peak, rss_mb())
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop = True
        self._t.join()


def durations(xs: list[float]) -> list[float]:
    return [b - a for a, b in zip(xs, xs[1:])]


CONFIGS = {"lora": ("lora", False), "full": ("full", False), "full+emb": ("full", True)}
MODES = (None, "ghost", "bk", "hooks")


def step_tokens(examples, q: float, steps: int, seed: int) -> list[int]:
    """Tokens in each step's Poisson batch: the loop's sampler replayed from its seed (a DP run's step log holds
    the step index only, so the benchmark counts what it trained on itself; DP and non-DP draw the same batches)."""
    import numpy as np

    from stages.finetune.sampling import poisson_draw
    from stages.shared.core.seeds import stream

    rng = np.random.default_rng(stream("finetune.sampler").int_seed(seed))
    lengths = np.array([len(e) for e in examples])
    return [int(lengths[poisson_draw(rng, len(examples), q)].sum()) for _ in range(steps)]


def measure(args, name: str, mode: str | None, steps: int, chunk: int) -> dict:
    import torch

    from stages.finetune.loop import TrainConfig, train
    from stages.shared.lm.trainable import build_model

    ctx = args.ctx
    paradigm, embeddings = CONFIGS[name]
    torch.manual_seed(0)
    params = dataclasses.replace(ctx["ft"], paradigm=paradigm, physical_batch_size=chunk, train_embeddings=embeddings)
    model, tok = build_model(ctx["model_dir"], params.trainable(ctx["meta"]), torch.device(args.device))
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    dp = dataclasses.replace(ctx["ft"].dp, enabled=True, delta=1e-5, grad_sample_mode=mode) if mode else None
    base_rss = rss_mb()
    ends: list[float] = []  # when each step ended (timed here: a DP run's log holds no timings)
    with PeakRSS() as mem:
        start = time.perf_counter()
        res = train(model, ctx["examples"], TrainConfig(
            steps=steps + 1, batch_size=ctx["ft"].batch_size, physical_batch_size=chunk, lr=ctx["ft"].lr,
            weight_decay=ctx["ft"].weight_decay, clip_norm=ctx["ft"].clip_norm, seed=ctx["ft"].seed,
            pad_id=tok.pad_token_id, dp=dp, progress=False, on_step=lambda rec: ends.append(time.perf_counter())))
    secs = list(durations([start, *ends]))[1:]  # the first step warms up
    tokens = sum(step_tokens(ctx["examples"], res.sample_rate, steps + 1, ctx["ft"].seed)[1:])
    out = {"config": name, "mode": mode or "non-DP", "trainable": n_train, "chunk": chunk,
           "step_s": sum(secs) / len(secs),
           "peak_mb": mem.peak, "growth_mb": mem.peak - base_rss, "tokens_per_s": tokens / sum(secs)}
    print(f"{name:8s} {out['mode']:6s} trainable={n_train / 1e6:7.2f}M step={out['step_s']:6.2f}s "
          f"peakRSS={mem.peak:7.0f}MB (+{out['growth_mb']:6.0f}MB over the loaded model)", flush=True)
    del model
    gc.collect()
    return out


def load_context(args) -> dict:
    from stages.canaries.schema import read_canaries
    from stages.finetune.params import load_finetune
    from stages.finetune.schema import TextSetup
    from stages.finetune.text import RunText
    from stages.shared.core.artifacts import locations
    from stages.shared.core.params import read_params
    from stages.shared.datasets import get_dataset
    from stages.shared.lm.examples import canary_examples
    from stages.shared.lm.loading import load_tokenizer

    raw = read_params(args.params)
    ft = load_finetune(next(iter(raw["runs"])), args.params, raw)
    where = locations(raw, args.params)
    meta, canaries = read_canaries(where.canaries)
    tok = load_tokenizer(where.base_model)
    run_text = RunText(where.processed, get_dataset(ft.dataset, raw), TextSetup.of(ft), {})
    text = run_text.examples("train", tok, ft.max_text_rows, ft.seed)
    examples = text + [e for k, rows in canaries.items()
                       for e in canary_examples([r for r in rows if r["member"]], ft.objective)]
    return {"ft": ft, "meta": meta, "model_dir": where.base_model, "examples": examples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per LoRA configuration (after 1 warm-up)")
    ap.add_argument("--full-steps", type=int, default=4, help="timed steps per full-FT configuration")
    ap.add_argument("--full-physical-batch", type=int, default=32, help="chunk size for full FT, non-DP and ghost")
    ap.add_argument("--hooks-physical-batch", type=int, default=8,
                    help="chunk size for full FT in hooks mode (its per-example gradients bound it)")
    ap.add_argument("--bk-physical-batch", type=int, default=24,
                    help="chunk size for full FT in bk mode (it holds every layer's output gradients of a chunk)")
    ap.add_argument("--only", nargs="*", choices=list(CONFIGS), default=list(CONFIGS))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--nproc", type=int, default=2, help="processes of the data-parallel run (1: skip it)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # a rank of the data-parallel run
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # one configuration, in a child process
    args = ap.parse_args()

    import torch

    args.ctx = load_context(args)
    if args.worker:
        return worker(args)
    if args.one:
        name, mode = args.one
        mode = None if mode == "non-DP" else mode
        lora = name == "lora"
        chunk = (args.ctx["ft"].physical_batch_size if lora else args.hooks_physical_batch if mode == "hooks" else
                 args.bk_physical_batch if mode == "bk" else args.full_physical_batch)
        res = measure(args, name, mode, args.steps if lora else args.full_steps, chunk)
        return Path(args.json).write_text(json.dumps(res))
    ft = args.ctx["ft"]
    results = []
    for name in args.only:
        for mode in MODES:
            results.append(child(args, name, mode))
    n = len(args.ctx["examples"])
    print(f"\nexpected batch {ft.batch_size} (q = {ft.batch_size / n:.4f}, n = {n}), device {args.device}, "
          f"torch threads = {torch.get_num_threads()}\n")
    print("| config | mode | trainable | chunk | step (s) | x non-DP | peak RSS (MB) | x non-DP |\n"
          "|---|---|---|---|---|---|---|---|")
    for r in results:
        base = next(b for b in results if b["config"] == r["config"] and b["mode"] == "non-DP")
        print(f"| {r['config']} | {r['mode']} | {r['trainable'] / 1e6:.2f}M | {r['chunk']} | {r['step_s']:.2f} | "
              f"{r['step_s'] / base['step_s']:.2f} | {r['peak_mb']:.0f} | {r['peak_mb'] / base['peak_mb']:.2f} |")
    if args.nproc > 1 and "lora" in args.only:
        one = next(r for r in results if r["config"] == "lora" and r["mode"] == "bk")
        many = data_parallel(args)
        results.append(many)
        print(f"\nLoRA DP-bk data-parallel: {args.nproc} processes {many['tokens_per_s']:.0f} tokens/s "
              f"(step {many['step_s']:.2f} s) vs 1 process {one['tokens_per_s']:.0f} tokens/s "
              f"(step {one['step_s']:.2f} s): {many['tokens_per_s'] / one['tokens_per_s']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def child(args, name: str, mode: str | None) -> dict:
    """One configuration in a fresh child process, so that no configuration's peak memory (or allocator
    state) carries into the next one's."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "one.json"
        cmd = [sys.executable, __file__, "--one", name, mode or "non-DP", "--params", args.params, "--steps",
               str(args.steps), "--full-steps", str(args.full_steps), "--full-physical-batch",
               str(args.full_physical_batch), "--hooks-physical-batch", str(args.hooks_physical_batch),
               "--bk-physical-batch", str(args.bk_physical_batch),
               "--device", args.device, "--json", str(out)]
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        return json.loads(out.read_text())


def data_parallel(args) -> dict:
    """The LoRA DP-bk configuration in ``args.nproc`` processes under torchrun; rank 0's measurement."""
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rank0.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
               __file__, "--worker", "--params", args.params, "--steps", str(args.steps), "--device", args.device,
               "--json", str(out)]
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // args.nproc))}
        subprocess.run(cmd, env=env, check=True)
        return {**json.loads(out.read_text()), "config": f"lora x{args.nproc} processes"}


def worker(args) -> None:
    import torch.distributed as dist

    from stages.finetune import distributed

    rank, world_size, device = distributed.init(args.device)
    args.device = str(device)
    try:
        res = measure(args, "lora", "bk", args.steps, args.ctx["ft"].physical_batch_size)
        if rank == 0:
            Path(args.json).write_text(json.dumps({**res, "world_size": world_size}))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
