"""What leaves the pipeline, beside the CLI: a run's canary-augmented training set exported to train elsewhere
(``export.py``, ``leakaudit export-canaries``) and a run's model released alone (``release.py``,
``leakaudit release``). Not a DVC stage (no ``__main__``): no stage's deps hold it, so editing it invalidates
nothing. It may import any stage module; no stage imports it. The export's format, which ``finetune@<run>`` reads
back when it imports a model trained elsewhere, is the fine-tune stage's own (stages/finetune/sealed.py)."""
