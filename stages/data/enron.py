"""Enron email: CMU maildir trees or the Kaggle ``emails.csv`` (columns ``file``, ``message``).

One row per message: sender, recipients, subject, date, body and the mailbox it came from.
Messages whose body exactly duplicates an earlier one (by file path order) are dropped.
A file that does not parse as an RFC-822 message fails the stage with its path.
"""
from __future__ import annotations

import csv
import email
import email.policy
import hashlib
import sys
from pathlib import Path
from typing import Iterator

from ..errors import DataError
from . import schemas
from .common import require_path, write_splits
from .registry import register_dataset
from .splits import split_groups

_REQUIRED = ("From",)


def _split_addrs(value: str | None) -> list[str]:
    if not value:
        return []
    return [a.strip() for a in " ".join(str(value).split()).split(",") if a.strip()]


def parse_message(raw: bytes, where: str, file: str) -> dict:
    """Parse one raw message; raise DataError naming ``where`` if it is not an email."""
    if b"\x00" in raw[:4096]:
        raise DataError(f"{where}: not an email message (binary content)")
    msg = email.message_from_bytes(raw, policy=email.policy.compat32)
    if msg.defects and not msg.keys():
        raise DataError(f"{where}: not an email message ({msg.defects[0].__class__.__name__})")
    missing = [h for h in _REQUIRED if not msg.get(h)]
    if missing:
        raise DataError(f"{where}: not an email message (no {', '.join(missing)} header)")
    if msg.is_multipart():
        parts = [p.get_payload(decode=False) for p in msg.walk() if p.get_content_type() == "text/plain"]
        body = "\n".join(p for p in parts if isinstance(p, str))
    else:
        body = msg.get_payload(decode=False)
        body = body if isinstance(body, str) else ""
    mailbox = (msg.get("X-Origin") or file.split("/")[0] or "").strip().lower()
    msg_id = (msg.get("Message-ID") or "").strip()
    if not msg_id:
        msg_id = "sha1:" + hashlib.sha1(raw).hexdigest()
    return {
        "message_id": msg_id,
        "file": file,
        "mailbox": mailbox,
        "sender": " ".join(str(msg.get("From", "")).split()),
        "recipients": _split_addrs(msg.get("To")) + _split_addrs(msg.get("Cc")) + _split_addrs(msg.get("Bcc")),
        "subject": " ".join(str(msg.get("Subject", "")).split()),
        "date": str(msg.get("Date", "")).strip(),
        "body": body.replace("\r\n", "\n"),
    }


def iter_maildir(root: Path) -> Iterator[dict]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    files = [p for p in files if p.suffix not in (".cats", ".md") and p.name != "categories.txt"]
    if not files:
        raise DataError(f"{root}: no message files in this maildir tree")
    for p in files:
        yield parse_message(p.read_bytes(), str(p), str(p.relative_to(root)))


def iter_csv(path: Path) -> Iterator[dict]:
    csv.field_size_limit(sys.maxsize)
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames:
            raise DataError(f"{path}: empty csv (expected columns file,message)")
        if "message" not in reader.fieldnames:
            raise DataError(f"{path}: csv lacks a 'message' column (got {', '.join(reader.fieldnames)})")
        n = 0
        for i, row in enumerate(reader, 2):
            n += 1
            file = row.get("file") or f"row{i}"
            yield parse_message(row["message"].encode("utf-8", "replace"), f"{path}:{i} ({file})", file)
        if n == 0:
            raise DataError(f"{path}: csv has a header but no messages")


def read_messages(path: Path, fmt: str) -> list[dict]:
    if fmt == "auto":
        fmt = "maildir" if path.is_dir() else "csv"
    if fmt == "maildir" and not path.is_dir():
        raise DataError(f"{path}: expected a maildir directory")
    return list(iter_maildir(path) if fmt == "maildir" else iter_csv(path))


def dedupe_bodies(rows: list[dict]) -> list[dict]:
    seen: set[str] = set()
    out = []
    for r in rows:
        key = hashlib.sha1(r["body"].strip().encode()).hexdigest()
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


@register_dataset("enron")
def build(params, out_dir: Path) -> list[tuple[str, int]]:
    path = require_path(params.path, "Enron data (maildir or emails.csv)", "preprocess.datasets.enron.path")
    rows = read_messages(path, params.format)
    stats = [("raw messages", len(rows))]
    by_id = {}
    for r in rows:
        by_id.setdefault(r["message_id"], r)
    rows = list(by_id.values())
    stats.append(("unique Message-IDs", len(rows)))
    rows = dedupe_bodies(rows)
    stats.append(("after exact-duplicate bodies dropped", len(rows)))
    assign = split_groups([r["message_id"] for r in rows], params.split.valid, params.split.test, params.seed)
    split_of = lambda r: next(s for s, ids in assign.items() if r["message_id"] in ids)  # noqa: E731
    return write_splits(out_dir, rows, schemas.ENRON, split_of, stats)
