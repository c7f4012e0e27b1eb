"""Offline Prefect/DVC settings for the command-line entry points of the flows (``python -m flows.<flow>``) and of
``leakaudit`` (``leakaudit.cli``).

Prefect reads its settings when it is imported, so an entry point calls ``apply_offline_defaults()``
before its first ``import prefect``; a value already exported wins. Shared code here because both the flows and the
CLI use it (the CLI imports the flows, never the reverse); no stage imports it.
"""
from __future__ import annotations

import os
from pathlib import Path


def offline_defaults() -> dict[str, str]:
    """Prefect's own settings plus the project's offline environment (stages.shared.core.env, its one definition)."""
    from stages.shared.core.env import OFFLINE_ENV

    return {
        "PREFECT_HOME": str(Path.cwd() / ".prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        **OFFLINE_ENV,
    }


def apply_offline_defaults() -> None:
    for key, value in offline_defaults().items():
        os.environ.setdefault(key, value)
