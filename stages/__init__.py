"""leakaudit: library and DVC stage entry points for auditing what fine-tuning leaks.

Sub-packages hold the pluggable parts (each behind a registry); the modules named after a DVC
stage (``preprocess``, ``secrets``, ``canaries``, ``finetune``, ``attack``, ``audit``, ``report``,
``base_model``) are thin command-line entry points that read their params section and call the
library.
"""
import os as _os

# Telemetry off by default: the pipeline is meant to run offline and reproducibly.
for _k, _v in {
    "GX_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    _os.environ.setdefault(_k, _v)

__version__ = "0.1.0"
