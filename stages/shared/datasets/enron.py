"""Enron email, example level (empirical-privacy-variance App. B.1) and the shared message reader.

Input: CMU maildir trees (any directory tree of raw RFC-822 files, e.g. all three subsets under
../shared/datasets/enron) or the Kaggle ``emails.csv`` (columns ``file``, ``message``). A file that
does not parse as a message fails the stage with its path.

Steps, each counted into stats.parquet (the paper's 517k -> 249k -> 44k -> 38k -> 33,508/2,725/1,279):
  0. raw messages; the same Message-ID seen twice (another folder or subset) is kept once
  1. de-duplicate on content (the body)
  2. keep messages whose sender is among both the top-N senders and the top-N receivers
  3. drop the two machine-generated patterns (matched ignoring whitespace), samples with more than
     ``max_tabs`` tab characters, and samples with fewer than ``min_tokens`` tokens
  4. split train/valid/test by message; extract secret candidates from train (frequent 50-char
     sequences and regex PII) and drop valid/test samples that contain any of them

Fine-tuning pairs: the whole body is the target (utility and leakage are measured on full samples).
Its real secrets (data/secrets/enron.parquet) are the train secret candidates; a run trained on a
secret when one of its training bodies contains the value. The message reader here is shared with
the user-level dataset (``enron_users``).
"""
from __future__ import annotations

import csv
import email
import email.policy
import hashlib
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

import pyarrow as pa

from ..core.errors import DataError
from ..core.gx import Expectation as E
from ..core.gx import Suite
from ..core.params import check
from ..core.seeds import stream
from . import pii
from .pii import contains_any
from .spec import (
    CANDIDATES,
    DatasetSpec,
    Processed,
    SplitParams,
    register_dataset,
    require_path,
    row_count_suites,
    row_ranges,
    split_groups,
    split_rows,
)


@dataclass(frozen=True)
class CandidateParams:
    """Secret candidates of the training split (held-out samples containing one are dropped)."""

    ngram_chars: int
    top_k: int
    min_count: int
    pii: tuple[Literal["phone", "email"], ...]

    def problems(self):
        return (check(self.ngram_chars >= 8, "ngram_chars", "must be >= 8", self.ngram_chars)
                + check(self.top_k > 0, "top_k", "must be > 0", self.top_k)
                + check(self.min_count >= 2, "min_count", "must be >= 2 (a secret recurs)", self.min_count))


@dataclass(frozen=True)
class EnronParams:
    path: str
    format: Literal["auto", "maildir", "csv"]
    #: keep senders among both the top-N senders and top-N receivers (0 = keep all)
    top_n: int
    #: machine-generated messages to drop (matched ignoring whitespace)
    drop_patterns: tuple[str, ...]
    max_tabs: int
    min_tokens: int
    split: SplitParams
    heldout_filter: CandidateParams
    seed: int
    rows: dict[str, tuple[int, ...]]

    def problems(self):
        return (check(self.top_n >= 0, "top_n", "must be >= 0", self.top_n)
                + check(self.max_tabs >= 0, "max_tabs", "must be >= 0", self.max_tabs)
                + check(self.min_tokens >= 0, "min_tokens", "must be >= 0", self.min_tokens)
                + row_ranges(self.rows))


SCHEMA = pa.schema([
    pa.field("message_id", pa.string(), nullable=False),
    pa.field("file", pa.string(), nullable=False),
    pa.field("mailbox", pa.string(), nullable=False),
    pa.field("sender", pa.string(), nullable=False),
    pa.field("recipients", pa.list_(pa.string()), nullable=False),
    pa.field("subject", pa.string(), nullable=False),
    pa.field("date", pa.string(), nullable=False),
    pa.field("body", pa.string(), nullable=False),
])

_ADDR = re.compile(r"[\w.'+-]+@[\w-]+(?:\.[\w-]+)+")
_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Word and punctuation pieces (tokenizer-free, so preprocessing does not depend on the model)."""
    return len(_TOKEN.findall(text))


def _addresses(value: str | None) -> list[str]:
    """Email addresses in a header value (lower-cased, in order)."""
    return [a.lower() for a in _ADDR.findall(" ".join(str(value or "").split()))]


def parse_message(raw: bytes, where: str, file: str) -> dict:
    """Parse one raw message; raise DataError naming ``where`` if it is not an email."""
    if b"\x00" in raw[:4096]:
        raise DataError(f"{where}: not an email message (binary content)")
    msg = email.message_from_bytes(raw, policy=email.policy.compat32)
    if msg.defects and not msg.keys():
        raise DataError(f"{where}: not an email message ({msg.defects[0].__class__.__name__})")
    if not msg.get("From"):
        raise DataError(f"{where}: not an email message (no From header)")
    if msg.is_multipart():
        parts = [p.get_payload(decode=False) for p in msg.walk() if p.get_content_type() == "text/plain"]
        body = "\n".join(p for p in parts if isinstance(p, str))
    else:
        body = msg.get_payload(decode=False)
        body = body if isinstance(body, str) else ""
    mailbox = (msg.get("X-Origin") or file.split("/")[0] or "").strip().lower()
    msg_id = (msg.get("Message-ID") or "").strip() or "sha1:" + hashlib.sha1(raw).hexdigest()
    sender = _addresses(msg.get("From"))
    return {
        "message_id": msg_id,
        "file": file,
        "mailbox": mailbox,
        "sender": sender[0] if sender else " ".join(str(msg.get("From")).split()).lower(),
        "recipients": _addresses(msg.get("To")) + _addresses(msg.get("Cc")) + _addresses(msg.get("Bcc")),
        "subject": " ".join(str(msg.get("Subject", "")).split()),
        "date": str(msg.get("Date", "")).strip(),
        "body": body.replace("\r\n", "\n"),
    }


_SKIP_SUFFIXES = (".cats", ".md", ".ann", ".json", ".csv", ".parquet")


def iter_maildir(root: Path) -> Iterator[dict]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    files = [p for p in files if p.suffix not in _SKIP_SUFFIXES and p.name not in ("categories.txt", "README")]
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
            yield parse_message((row["message"] or "").encode("utf-8", "replace"), f"{path}:{i} ({file})", file)
        if n == 0:
            raise DataError(f"{path}: csv has a header but no messages")


def read_messages(path: Path, fmt: str) -> list[dict]:
    if fmt == "auto":
        fmt = "maildir" if path.is_dir() else "csv"
    if fmt == "maildir" and not path.is_dir():
        raise DataError(f"{path}: expected a maildir directory")
    return list(iter_maildir(path) if fmt == "maildir" else iter_csv(path))


def unique_ids(rows: list[dict]) -> list[dict]:
    by_id: dict[str, dict] = {}
    for r in rows:
        by_id.setdefault(r["message_id"], r)
    return list(by_id.values())


def body_key(body: str) -> str:
    return hashlib.sha1(body.strip().encode()).hexdigest()


def dedupe_bodies(rows: list[dict]) -> list[dict]:
    seen: set[str] = set()
    out = []
    for r in rows:
        key = body_key(r["body"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def top_addresses(counts: Counter, n: int) -> set[str]:
    return {a for a, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]}


def frequent_correspondents(rows: list[dict], top_n: int) -> list[dict]:
    """Messages whose sender is among the top-N senders and also among the top-N receivers."""
    senders = Counter(r["sender"] for r in rows)
    receivers = Counter(a for r in rows for a in set(r["recipients"]))
    keep = top_addresses(senders, top_n) & top_addresses(receivers, top_n)
    return [r for r in rows if r["sender"] in keep]


def _squash(s: str) -> str:
    return "".join(s.split())


def machine_filters(rows: list[dict], patterns, max_tabs: int, min_tokens: int) -> tuple[list[dict], dict]:
    pats = [_squash(p) for p in patterns]
    out, dropped = [], Counter()
    for r in rows:
        body = r["body"]
        squashed = _squash(body)
        if any(p in squashed for p in pats):
            dropped["machine-generated pattern"] += 1
        elif body.count("\t") > max_tabs:
            dropped[f"more than {max_tabs} tabs"] += 1
        elif count_tokens(body) < min_tokens:
            dropped[f"fewer than {min_tokens} tokens"] += 1
        else:
            out.append(r)
    return out, dropped


def secret_candidates(texts: list[str], params) -> list[dict]:
    """Secret candidates of a training split (``heldout_filter`` params): frequent long sequences and regex PII."""
    return pii.secret_candidates(texts, (params.ngram_chars, params.top_k, params.min_count), params.pii)


def build(params: EnronParams) -> Processed:
    path = require_path(params.path, "Enron data (maildir or emails.csv)", "preprocess.datasets.enron.path")
    rows = read_messages(path, params.format)
    stats = [("raw messages", len(rows))]
    rows = unique_ids(rows)
    stats.append(("unique Message-IDs", len(rows)))
    rows = dedupe_bodies(rows)
    stats.append(("step 1: content de-duplicated", len(rows)))
    if params.top_n:
        rows = frequent_correspondents(rows, params.top_n)
    stats.append((f"step 2: sender in top-{params.top_n} senders and receivers", len(rows)))
    rows, dropped = machine_filters(rows, params.drop_patterns, params.max_tabs, params.min_tokens)
    stats += [(f"step 3 dropped: {why}", n) for why, n in sorted(dropped.items())]
    stats.append(("step 3: after pattern/tab/length filters", len(rows)))
    assign = split_groups([r["message_id"] for r in rows], params.split.valid, params.split.test,
            stream("datasets.split").int_seed(params.seed))
    splits = split_rows(rows, "message_id", assign)
    candidates = secret_candidates([r["body"] for r in splits["train"]], params.heldout_filter)
    needles = [c["value"] for c in candidates]
    for s in ("valid", "test"):
        before = len(splits[s])
        splits[s] = [r for r, hit in zip(splits[s], contains_any([r["body"] for r in splits[s]], needles)) if not hit]
        stats.append((f"step 4: {s} samples containing a train secret candidate dropped", before - len(splits[s])))
    stats.append(("train secret candidates", len(candidates)))
    stats += [(f"final {s}", len(v)) for s, v in splits.items()]
    return Processed(SCHEMA, splits, stats, {"candidates": (CANDIDATES, candidates)})


def message_frame(processed: Processed):
    """(rows, frame of ids, split, body hash and length): the columns the Enron contracts look at."""
    import pandas as pd

    rows = [(s, r) for s, rs in processed.splits.items() for r in rs]
    return rows, pd.DataFrame({
        "message_id": [r["message_id"] for _, r in rows],
        "split": [s for s, _ in rows],
        "body_sha1": [body_key(r["body"]) for _, r in rows],
        "body_len": [len(r["body"].strip()) for _, r in rows],
    })


def contract(processed: Processed, params: EnronParams) -> list[Suite]:
    import pandas as pd

    rows, frame = message_frame(processed)
    frame["tokens"] = [count_tokens(r["body"]) for _, r in rows]
    frame["tabs"] = [r["body"].count("\t") for _, r in rows]
    needles = [c["value"] for c in processed.extra.get("candidates", (None, []))[1]]
    heldout = pd.DataFrame({"contains_train_secret": contains_any([r["body"] for s, r in rows if s != "train"],
                                                                  needles)})
    return [
        Suite("enron_messages", frame, [
            E("ExpectColumnValuesToBeUnique", {"column": "message_id"}),  # splits disjoint by message
            E("ExpectColumnValuesToBeUnique", {"column": "body_sha1"}),  # content de-duplication holds
            E("ExpectColumnValuesToBeBetween", {"column": "body_len", "min_value": 1}),  # no empty text
            E("ExpectColumnValuesToBeBetween", {"column": "tokens", "min_value": params.min_tokens}),
            E("ExpectColumnValuesToBeBetween", {"column": "tabs", "max_value": params.max_tabs}),
        ]),
        Suite("enron_heldout_secrets", heldout, [
            E("ExpectColumnValuesToBeInSet", {"column": "contains_train_secret", "value_set": [False]})]),
    ] + row_count_suites("enron", processed.splits, params.rows)


def pairs(rows: list[dict]) -> list[tuple[str, str]]:
    """The whole email body is the target, predicted from a BOS token."""
    return [("", r["body"]) for r in rows]


def trained_secrets(trained_rows: list[dict], secrets: list[dict]) -> list[bool]:
    """A secret counts as trained when one of the run's training bodies contains its value."""
    text = "\n\x00".join(r["body"] for r in trained_rows)
    return [s["value"] in text for s in secrets]


def texts(rows: list[dict]) -> list[tuple[str, str]]:
    return [(r["message_id"], r["body"]) for r in rows]


SPEC = register_dataset(DatasetSpec(
    name="enron", params=EnronParams, schema=SCHEMA, build=build, contract=contract, pairs=pairs, secrets="enron",
    trained_secrets=trained_secrets, texts=texts))
