"""Scoring throughput on the default model, measured in one process.

Workload: every canary (prefix + secret; the SFT score needs the secret position only) plus real
text rows (persona + partner -> reply; loss on the reply). Three ways to get the same numbers:

  ours      stages.shared.lm.scoring.token_logprobs: length-bucketed batches, output layer only at
            the labelled positions
  bare      the transformer body alone (no output layer, no log-softmax) on the very same batches:
            the floor any scorer pays
  loop      the naive per-example loop: model(input_ids).logits, full log-softmax, one example at a time

Prints tokens/s of each and the ratios ours/bare (goal >= 0.9) and ours/loop (goal >= 10).

    python benchmarks/scoring.py [--loop-examples 200]
"""
from __future__ import annotations

import argparse
import time


def args_of():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--loop-examples", type=int, default=200)
    ap.add_argument("--text-rows", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    return ap.parse_args()


def workload(args):
    """(model, tokenizer, examples: every canary + text rows, canaries by kind)."""
    from stages.canaries.schema import read_canaries
    from stages.finetune.params import load_finetune
    from stages.finetune.schema import TextSetup
    from stages.finetune.text import RunText
    from stages.shared.core.artifacts import locations
    from stages.shared.core.params import read_params
    from stages.shared.datasets import get_dataset
    from stages.shared.lm.canary_lm import CanaryLM
    from stages.shared.lm.examples import canary_examples
    from stages.shared.lm.loading import load_base

    raw = read_params(args.params)
    ft = load_finetune(next(iter(raw["runs"])), args.params, raw)
    where = locations(raw, args.params)
    meta, canaries = read_canaries(where.canaries)
    base, tok = load_base(where.base_model)
    model = CanaryLM(base, num_new=meta["num_new_tokens"], init=meta["new_token_init"]).eval()
    run_text = RunText(where.processed, get_dataset(ft.dataset, raw), TextSetup.of(ft), {})
    text = run_text.examples("test", tok, args.text_rows, 0)
    examples = [e for rows in canaries.values() for e in canary_examples(rows, "sft")] + text
    return model, tok, examples, canaries


def time_ours_and_bare(model, examples, pad, batch_size):
    """Best of two alternating timings of ``token_logprobs`` and of the transformer body on the same batches."""
    import torch

    from stages.shared.lm.batching import chunks, collate
    from stages.shared.lm.scoring import token_logprobs

    parts = chunks(range(len(examples)), [len(e) for e in examples], batch_size)

    def bare() -> None:
        with torch.no_grad():
            for part in parts:
                b = collate([examples[i] for i in part], pad, torch.device("cpu"))
                model.decoder(inputs_embeds=model.embed_ids(b["input_ids"]), attention_mask=b["attention_mask"],
                              use_cache=False)

    token_logprobs(model, examples[:64], pad, batch_size)  # warm-up
    t_ours, t_bare = float("inf"), float("inf")
    for _ in range(2):  # alternate and keep the best of each, so neither gets a warmer machine
        t = time.time()
        ours = token_logprobs(model, examples, pad, batch_size)
        t_ours = min(t_ours, time.time() - t)
        t = time.time()
        bare()
        t_bare = min(t_bare, time.time() - t)
    return ours, t_ours, t_bare


def time_loop(model, subset):
    """The naive per-example loop: full log-softmax, one example at a time; (log-probs, seconds)."""
    import numpy as np
    import torch

    t = time.time()
    loop = []
    with torch.no_grad():
        for e in subset:
            ids = torch.tensor(e.ids[None, :-1])
            hidden = model.decoder(inputs_embeds=model.embed_ids(ids), use_cache=False)[0]
            logits = torch.cat([model.head(hidden), model.new_head(hidden)], -1).log_softmax(-1)[0]
            lab = e.labels[1:]
            loop.append(logits[np.flatnonzero(lab != -100), lab[lab != -100]].numpy())
    return loop, time.time() - t


def main() -> None:
    import numpy as np
    import torch

    args = args_of()
    model, tok, examples, canaries = workload(args)
    n_tokens = sum(len(e) - 1 for e in examples)  # positions fed to the model
    ours, t_ours, t_bare = time_ours_and_bare(model, examples, tok.pad_token_id, args.batch_size)
    rng = np.random.default_rng(0)
    subset = [examples[i] for i in rng.choice(len(examples), min(args.loop_examples, len(examples)), replace=False)]
    sub_tokens = sum(len(e) - 1 for e in subset)
    loop, t_loop = time_loop(model, subset)
    idx = {id(e): i for i, e in enumerate(examples)}  # the loop computes the same numbers
    err = max(float(np.abs(ours[idx[id(e)]] - lp).max()) for e, lp in zip(subset, loop))
    n_canaries = sum(len(r) for r in canaries.values())
    print(f"examples {len(examples)} ({n_canaries} canaries + {len(examples) - n_canaries} text rows), "
          f"{n_tokens} tokens, batch {args.batch_size}, torch threads {torch.get_num_threads()}")
    print(f"ours : {n_tokens / t_ours:8.0f} tokens/s ({t_ours:.1f} s)")
    print(f"bare : {n_tokens / t_bare:8.0f} tokens/s ({t_bare:.1f} s)  transformer body only, same batches")
    print(f"loop : {sub_tokens / t_loop:8.0f} tokens/s ({t_loop:.1f} s for {len(subset)} examples)")
    print(f"ours / bare = {t_bare / t_ours:.2f}   (goal >= 0.9)")
    per_pass = (n_tokens / t_ours) / (sub_tokens / t_loop)
    print(f"ours / loop = {per_pass:.1f}x per forward pass  (goal >= 10)")
    # the attack stage scores each example once and every membership attack (loss, zlib, min-k, ratio)
    # reads the cache; a naive implementation runs the loop once per attack plus once for the reference
    print(f"ours / loop for the four membership attacks + reference = {per_pass * 5 / 2:.1f}x "
          "(naive: one per-example loop per attack and one for the reference model = 5 passes; ours: one "
          "batched pass of the target and one of the reference model, shared by every attack = 2 passes)")
    print(f"max |ours - loop| log-prob difference: {err:.2e}")


if __name__ == "__main__":
    main()
