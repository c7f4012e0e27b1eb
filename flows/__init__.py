"""Prefect flows that only orchestrate: DVC owns the DAG, the cache and the lineage (dvc.lock).

Importing a flow module changes no process state; each flow's command-line entry point applies the
offline Prefect settings (``stages.shared.core.prefect_env``) before Prefect is imported. The ``leakaudit`` command line
(``leakaudit/``) starts these flows; no flow imports it.
"""
