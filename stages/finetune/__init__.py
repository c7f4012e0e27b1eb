"""Stage ``finetune@<run>``: fine-tune the base model on a processed dataset plus the member canaries
(non-DP, or opacus DP-SGD/DP-Adam with sigma calibrated by the accountant) -> data/models/<run>/
(trained tensors, run.json and manifest.parquet per ``schema.py``, train_log.jsonl), and its timings ->
logs/finetune/<run>.json (uncached)."""
