"""Prefect flows that only orchestrate: DVC owns the DAG, the cache and the lineage (dvc.lock)."""
import os as _os
from pathlib import Path as _Path

# Safe offline defaults; set them before prefect is imported. Override by exporting them.
for _k, _v in {
    "PREFECT_HOME": str(_Path.cwd() / ".prefect"),
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
}.items():
    _os.environ.setdefault(_k, _v)
