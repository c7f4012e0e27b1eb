"""The format of an export for training elsewhere, shared by its writer (``leakaudit export-canaries``,
stages/tools/handoff/export.py) and its reader here (``external.py``: ``finetune@<run>`` importing a model trained on
it):
the version constants, the export's file names, the canaries' new-token text, the canary set's digest and the
sealed membership file's reader. It lives in the fine-tune stage because the import reads it: a change here is a
change of what ``finetune@<run>`` accepts, and reruns it.

The membership file (auditor side, JSON, ``MEMBERSHIP_VERSION``) maps every opaque example id of the export back to
its source and records the canary set it was drawn from (``canaries_digest``), the text setup
(``schema.TextSetup``), the objective and the members and non-members of every kind, so the import refuses a model
trained on another export. Its sha-256 is the commitment ``export.json`` holds.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..canaries.schema import META
from ..shared.core.errors import DataError
from ..shared.core.io import file_digest, missing

EXPORT_VERSION = 1
MEMBERSHIP_VERSION = 1
TRAIN_FILE = "train.jsonl"
DATASET_DIR = "dataset"
TOKENIZER_DIR = "tokenizer"
EXPORT_FILE = "export.json"


def canary_token(j: int) -> str:
    """The text of new canary token j (id = base vocabulary size + j) in the exported tokenizer."""
    return f"<|canary_{j}|>"


def canaries_digest(canary_dir: Path) -> str:
    """sha-256 over the canary set's files (meta and every kind's table): which canaries, which members."""
    canary_dir = Path(canary_dir)
    if not (canary_dir / META).is_file():
        raise missing(canary_dir / META, "canaries")
    h = hashlib.sha256()
    for name in [META] + sorted(p.name for p in canary_dir.glob("*.parquet")):
        h.update(name.encode() + file_digest(canary_dir / name, "sha256").encode())
    return h.hexdigest()


def read_membership(path: Path) -> dict:
    """The sealed membership file of an export; its sha-256 is returned under ``sha256``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no membership file (written by `leakaudit export-canaries`)")
    blob = path.read_bytes()
    try:
        record = json.loads(blob)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not a membership file ({exc.msg})") from None
    if not isinstance(record, dict) or record.get("version") != MEMBERSHIP_VERSION:
        raise DataError(f"{path}: membership file version "
                        f"{record.get('version') if isinstance(record, dict) else None!r}"
                        f", expected {MEMBERSHIP_VERSION}")
    return {**record, "sha256": hashlib.sha256(blob).hexdigest()}
