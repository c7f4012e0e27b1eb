"""Step 2 of "Audit your own fine-tune" with TRL: ``SFTTrainer`` on an export of `leakaudit export-canaries`,
prompt/completion rows (loss on the completion only), LoRA on every linear layer with the input embedding and the
output head trainable (peft's ``modules_to_save``: the canaries' new-token rows must learn); saves a PEFT adapter,
which `dvc repro` imports over the base model.

    python docs/examples/train_trl.py --export /tmp/ext-export --base data/models/base --out external/model

As with any trainer: train on every row of train.jsonl (the canaries are among them, unmarked), use the exported
tokenizer (it knows the canaries' new tokens) with the embedding resized to it, and save the adapter with the
tokenizer. No pipeline code is imported here.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", required=True, help="the directory leakaudit export-canaries wrote")
    ap.add_argument("--base", required=True, help="the base model to fine-tune (HF directory or hub id)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    export = Path(args.export)
    tok = AutoTokenizer.from_pretrained(export / "tokenizer")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    base_vocab = len(AutoTokenizer.from_pretrained(args.base))
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    model.resize_token_embeddings(len(tok))
    rows = [json.loads(line) for line in (export / "train.jsonl").open()]
    start = tok.bos_token or tok.eos_token  # a text row has an empty prompt: it is predicted from BOS
    data = Dataset.from_list([{"prompt": start + r["prompt"], "completion": r["completion"]} for r in rows])
    # The canaries' new tokens (ids from base_vocab on) need trainable input and output rows. peft's
    # trainable_token_indices would train those rows alone, but TRL 1.16's fused LM head reads lm_head.weight and
    # lm_head.bias directly, which its wrapper of a tied head lacks (AttributeError); modules_to_save trains and saves
    # full copies of the embedding and the head instead (a larger adapter, the same audit).
    print(f"{len(tok) - base_vocab} new tokens (canaries); LoRA on all linear layers, embedding and head trained")
    lora = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM",
                      modules_to_save=["embed_tokens", "lm_head"])
    config = SFTConfig(output_dir=str(Path(args.out) / "trl"), num_train_epochs=args.epochs,
                       per_device_train_batch_size=args.batch_size, learning_rate=args.lr,
                       max_length=args.max_length, completion_only_loss=True, seed=args.seed, report_to="none",
                       save_strategy="no", logging_steps=10, use_cpu=not torch.cuda.is_available())
    trainer = SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tok, peft_config=lora)
    trainer.train()
    trainer.model.save_pretrained(args.out)
    tok.save_pretrained(args.out)


if __name__ == "__main__":
    main()
