"""The DP engine self-check (``leakaudit selfcheck``, leakaudit/selfcheck.py): a tool beside the pipeline, not a DVC
stage (no ``__main__``), so no stage's deps hold it and editing it invalidates nothing.

``params.py`` (the ``selfcheck`` section of params.yaml), ``probe.py`` (the probe models), ``trials.py`` (the
probes trained through the fine-tune's own DP path, in this process or in torchrun ranks:
``python -m stages.tools.selfcheck.trials``) and ``verdict.py`` (the specification tests, the verdict and
reports/selfcheck.json). It may import any stage module; no stage imports it."""
