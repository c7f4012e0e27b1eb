"""Shared language-model code: loading the base model, the canary LM wrapper (new-token rows, soft prompt,
prefix), the trainable model of a run, tokenised examples, length-bucketed batching, batched scoring
(log-probabilities of labelled tokens, fp32) and KV-cached generation."""
