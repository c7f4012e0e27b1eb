"""Stage ``audit``: the one-run epsilon lower bound (``one_run.py``; Steinke, Nasr, Jagielski 2023), TPR at
fixed FPR and AUROC with bootstrap intervals (``roc.py``), exposure and memorization summaries, and the
Canary sanity check (``iid.py``) -> reports/metrics.json (per ``schema.py``) and reports/roc.parquet."""
