"""Audit statistics: the one-run epsilon lower bound (Steinke, Nasr, Jagielski 2023) and ROC metrics."""
from .one_run import epsilon_lower_bound, guesses, one_run_audit, p_value, swept_audit  # noqa: F401
from .roc import auroc, bootstrap_ci, roc_curve, tpr_at_fpr  # noqa: F401
