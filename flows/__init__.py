"""Prefect flows that only orchestrate: DVC owns the DAG, the cache and the lineage (dvc.lock).

Each module here is a flow: a Prefect ``@flow`` (``pipeline``, ``sweep``, ``variance``, ``audit_study``) or a study's
entry point over DVC experiments, run as ``python -m flows.<name>``. What they run on is ``flows.runtime``.

Importing a flow module changes no process state; each flow's command-line entry point applies the offline Prefect
settings (``stages.shared.core.prefect_env``) before Prefect is imported. The ``leakaudit`` command line
(``leakaudit/``) starts these flows; no flow imports it.
"""
