"""Stage ``attack@<run>``: every configured attack on a fine-tuned run -> data/scores/<run>/ (one table per
attack per ``schema.py``, the shared log-probability cache, run.json). Attacks (``catalog.py`` lists them):
membership (loss, ref_ratio, zlib, min_k, user_inference), exposure, memorization (vmr, air, acr),
inversion (eia)."""
