"""DP / non-DP cost of a fine-tuning step on the default model, measured in one process.

For LoRA and for full fine-tuning, the same Poisson-sampled batches of the default training set
(PersonaChat rows + member canaries) are trained once without and once with opacus DP-SGD; we
report the mean step time after a warm-up step, the DP/non-DP ratio, and the peak resident memory
reached during each configuration (sampled every 5 ms from /proc/self/status).

    python benchmarks/dp_overhead.py [--steps 6] [--full-steps 4]

Needs the base model, canaries and processed PersonaChat: `dvc repro canaries preprocess@personachat`.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rss_mb() -> float:
    for line in open("/proc/self/status"):
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per LoRA configuration (after 1 warm-up)")
    ap.add_argument("--full-steps", type=int, default=4, help="timed steps per full-FT configuration")
    ap.add_argument("--full-physical-batch", type=int, default=8, help="chunk size for full FT (memory bound)")
    args = ap.parse_args()

    import torch

    from stages.canaries.schema import read_canaries
    from stages.core.artifacts import locations
    from stages.core.params import read_params
    from stages.finetune.loop import train
    from stages.finetune.params import load_finetune
    from stages.finetune.schema import TextSetup, text_examples_of
    from stages.lm.examples import canary_examples
    from stages.lm.loading import load_tokenizer
    from stages.lm.trainable import build_model

    raw = read_params(args.params)
    ft = load_finetune(next(iter(raw["runs"])), args.params, raw)
    where = locations(raw, args.params)
    model_dir = where.base_model
    meta, canaries = read_canaries(where.canaries)
    tok = load_tokenizer(model_dir)
    text = text_examples_of(where.processed, "train", tok, TextSetup.of(ft), ft.max_text_rows, ft.seed)
    examples = text + [e for k, rows in canaries.items() for e in canary_examples([r for r in rows if r["member"]],
                                                                                   ft.objective)]
    dp = dataclasses.replace(ft.dp, enabled=True, delta=1e-5)
    results = {}
    for paradigm, steps, chunk in [("lora", args.steps, ft.physical_batch_size),
                                   ("full", args.full_steps, args.full_physical_batch)]:
        for private in (False, True):
            torch.manual_seed(0)
            params = dataclasses.replace(ft, paradigm=paradigm, physical_batch_size=chunk)
            model, tok = build_model(model_dir, params.trainable(meta),
                                     torch.device("cpu"))
            n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
            base_rss = rss_mb()
            with PeakRSS() as mem:
                res = train(model, examples, steps=steps + 1, batch_size=ft.batch_size, physical_batch_size=chunk,
                            lr=ft.lr, weight_decay=ft.weight_decay, clip_norm=ft.clip_norm, seed=ft.seed,
                            pad_id=tok.pad_token_id, dp=dp if private else None)
            secs = [r["seconds"] for r in res.log[1:]]
            results[(paradigm, private)] = (sum(secs) / len(secs), mem.peak, mem.peak - base_rss, n_train)
            print(f"{paradigm:5s} {'DP   ' if private else 'nonDP'} trainable={n_train / 1e6:7.2f}M "
                  f"step={results[(paradigm, private)][0]:6.2f}s peakRSS={mem.peak:7.0f}MB "
                  f"(+{mem.peak - base_rss:6.0f}MB over the loaded model)", flush=True)
            del model
    print(f"\nexpected batch {ft.batch_size} (q = {ft.batch_size / len(examples):.4f}, n = {len(examples)}), "
          f"torch threads = {torch.get_num_threads()}")
    for paradigm in ("lora", "full"):
        (t0, m0, d0, _), (t1, m1, d1, _) = results[(paradigm, False)], results[(paradigm, True)]
        print(f"{paradigm}: DP/non-DP step time = {t1 / t0:.2f}x ; peak RSS {m0:.0f} -> {m1:.0f} MB "
              f"(growth during training {d0:.0f} -> {d1:.0f} MB)")


if __name__ == "__main__":
    main()
