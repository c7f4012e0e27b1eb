"""Stage ``attack@<run>``: every configured attack on a fine-tuned run -> data/scores/<run>/ (one table per
attack per ``schema.py``, the shared log-probability cache, run.json). Attacks (``catalog.py`` lists them):
membership (``scores.py``, ``membership.py``: loss, ref_ratio, zlib, min_k, min_k_pp, ez_mia, contrast, whitebox),
user inference (``user_inference.py``), exposure, memorization (vmr, air, acr), inversion (eia)."""
