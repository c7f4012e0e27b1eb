"""The offline, telemetry-free environment every entry point runs under, defined once.

Stage CLIs (``stages.shared.core.cli``), the flows' entry points (``flows.settings``, the sweep's subprocesses) and
the test session all take these values from here. An exported value wins (``apply_offline_env`` only sets
what is unset), so a user can still opt in.
"""
from __future__ import annotations

import os
from typing import MutableMapping

#: telemetry off: the pipeline runs offline and reproducibly
OFFLINE_ENV = {
    "GX_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def apply_offline_env(environ: MutableMapping[str, str] | None = None) -> None:
    """Set every ``OFFLINE_ENV`` value that ``environ`` (default: ``os.environ``) does not set yet."""
    environ = os.environ if environ is None else environ
    for name, value in OFFLINE_ENV.items():
        environ.setdefault(name, value)
