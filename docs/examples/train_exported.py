"""Step 2 of "Audit your own fine-tune": train a causal LM on an export of `leakaudit export-canaries` with plain
transformers and torch (no opacus, no pipeline code), as a team's own training loop would.

    python docs/examples/train_exported.py --export /tmp/ext-export --base data/models/base --out external/model

Whatever trains the model, two things matter to the audit: train on every row of train.jsonl (the canaries are
among them, unmarked), and use the exported tokenizer (it knows the canaries' new tokens) with the embedding
resized to it. Save the model and the tokenizer together.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", required=True, help="the directory leakaudit export-canaries wrote")
    ap.add_argument("--base", required=True, help="the base model to fine-tune (HF directory or hub id)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    export = Path(args.export)
    tok = AutoTokenizer.from_pretrained(export / "tokenizer")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    model.resize_token_embeddings(len(tok))
    rows = [json.loads(line) for line in (export / "train.jsonl").open()]
    start = tok.bos_token or tok.eos_token
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model.train()
    for epoch in range(args.epochs):
        random.shuffle(rows)
        total = 0.0
        for i in range(0, len(rows), args.batch_size):
            batch = tok([start + r["text"] for r in rows[i:i + args.batch_size]], return_tensors="pt", padding=True,
                        truncation=True, max_length=args.max_length, add_special_tokens=False)
            labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
            loss = model(**batch, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            total += float(loss)
        print(f"epoch {epoch + 1}: mean loss {total / max(1, -(-len(rows) // args.batch_size)):.3f}")
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)


if __name__ == "__main__":
    main()
