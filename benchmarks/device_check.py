"""The DP engine on a CUDA device (bf16 autocast in training, fp32 scoring) against itself and the CPU.

A tiny random Llama (testkit.models.make_tiny_lm) with a BPE tokenizer trained on the vendored PersonaChat, converted
by the real base_model code. Per paradigm (LoRA; full fine-tuning with the embeddings) and clipping (1e-2: every
example clipped; 1e3: none): one DP-SGD step's update (noise off, lr 1, 8 canaries in chunks of 3) in hooks, ghost
and bk on the device, against device hooks and against CPU hooks (relative L2 difference: bf16 rounding is about
4e-3). Then a 3-step DP run through the training loop in each mode (the accountant's epsilon, finite weights) and
fp32 log-probabilities on the device against the CPU. Prints and writes device_check.json.

    python benchmarks/device_check.py [--out DIR]     # needs a CUDA device
    python benchmarks/device_check.py --cpu           # the CPU as "the device": the script's smoke test
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tiny_base(tmp: Path) -> Path:
    """A tiny random Llama and a 400-token BPE tokenizer, converted as the base_model stage does."""
    from testkit.models import make_tiny_lm
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from stages.base_model.convert import convert
    from stages.base_model.params import ModelParams

    tk = Tokenizer(models.BPE(unk_token=None))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator((ROOT / "data/raw/personachat/valid_self_original_no_cands.txt").read_text()
                           .splitlines()[:400], trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                  bos_token="<|endoftext|>")
    make_tiny_lm(len(tok)).save_pretrained(tmp / "lm")
    tok.save_pretrained(tmp / "lm")
    convert(ModelParams(name_or_path=str(tmp / "lm"), revision=None, dtype="float32", out=str(tmp / "base")),
            tmp / "base")
    return tmp / "base"


def one_step(base: Path, device, mode: str, clip: float, paradigm: str, emb: bool) -> dict:
    """The parameter change of one noise-free DP-SGD step (lr 1) through the engine's dp_step on ``device``
    (testkit.models.one_dp_step, the CPU tests' own step), moved to the CPU."""
    from testkit.models import one_dp_step

    delta, *_ = one_dp_step(base, mode, clip, False, paradigm, emb, device=device)
    return {n: d.float().cpu() for n, d in delta.items()}


def rel(a: dict, b: dict) -> float:
    num = sum(float(((a[n] - b[n]) ** 2).sum()) for n in a) ** 0.5
    return num / max(sum(float((b[n] ** 2).sum()) for n in b) ** 0.5, 1e-30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--cpu", action="store_true", help="run on the CPU as if it were the device (smoke test)")
    args = ap.parse_args()
    import numpy as np
    import torch
    from testkit.models import canary_rows, dp_params, tiny_canary_lm

    from stages.finetune.loop import TrainConfig, train
    from stages.shared.lm.examples import canary_examples
    from stages.shared.lm.scoring import token_logprobs

    cpu = torch.device("cpu")
    dev = cpu if args.cpu else torch.device("cuda")
    out: dict = {"torch": torch.__version__, "device": "cpu (--cpu)" if args.cpu else torch.cuda.get_device_name(0)}
    base = tiny_base(Path(tempfile.mkdtemp()))
    rows = []
    for paradigm, emb in (("lora", False), ("full", True)):
        for clip in (1e-2, 1e3):
            ref = one_step(base, dev, "hooks", clip, paradigm, emb)
            row = {"paradigm": paradigm + ("+emb" if emb else ""), "clip": clip,
                   "device_hooks_vs_cpu_hooks": rel(ref, one_step(base, cpu, "hooks", clip, paradigm, emb)),
                   **{f"device_{m}_vs_device_hooks": rel(one_step(base, dev, m, clip, paradigm, emb), ref)
                      for m in ("ghost", "bk")},
                   "update_norm": sum(float((g ** 2).sum()) for g in ref.values()) ** 0.5}
            rows.append(row)
            print(json.dumps(row), flush=True)
    out["one_step_noise_off"] = rows
    for mode in ("hooks", "ghost", "bk"):
        torch.manual_seed(0)
        m, tok = tiny_canary_lm(base, dev)
        exs = canary_examples(canary_rows(m.base_vocab, 40), "sft")
        t0 = time.time()
        res = train(m, exs, TrainConfig(steps=3, batch_size=8, physical_batch_size=4, lr=0.05, weight_decay=0.0,
                                        clip_norm=1.0, seed=0, pad_id=tok.pad_token_id, progress=False,
                                        dp=dp_params(enabled=True, epsilon=8.0, delta=1e-5, grad_sample_mode=mode)))
        out[f"train_{mode}"] = {"epsilon_spent": res.privacy.epsilon_spent, "steps": res.steps,
                                "finite": all(bool(torch.isfinite(p).all()) for p in m.parameters()),
                                "seconds": round(time.time() - t0, 2)}
    m.eval()
    on_device = token_logprobs(m, exs, tok.pad_token_id, batch_size=8)
    on_cpu = token_logprobs(m.to(cpu), exs, tok.pad_token_id, batch_size=8)
    out["scoring_fp32_max_abs_diff_device_vs_cpu"] = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                                                         for a, b in zip(on_device, on_cpu))
    print(json.dumps(out, indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "device_check.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
