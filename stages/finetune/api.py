"""The finetune stage's public surface for the flows: a run's canary-augmented training set exported to train
elsewhere (``leakaudit export-canaries``), a run's model released alone (``leakaudit release``) and the DP engine
self-check's probe (flows/selfcheck.py)."""
from . import selfcheck  # noqa: F401  (the probe: Config, configs_of, run_trial, quiet_q1)
from .export import export_for  # noqa: F401
from .release import release_for  # noqa: F401
