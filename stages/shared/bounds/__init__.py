"""Shared: the audit maths. The one-run epsilon lower bound (``one_run``; Steinke, Nasr, Jagielski 2023), its
bounds under a Gaussian trade-off curve (``gdp``) and under the run's own composed curve (``curve``), the ideal audit
of the last-iterate linear model (``ceiling``) and the keys every bound is recorded under (``keys``). The audit
stage, the variance stage, the DP engine self-check and the studies import it; it imports only
``stages.shared.core``."""
