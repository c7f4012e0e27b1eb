"""Secret candidates of any dataset's training text (empirical-privacy-variance App. B.6): recurring long sequences
(``ngrams.frequent_sequences``) and values matching a regex, the built-in PII patterns (phone, email) or any pattern
params name. Read by Enron's preprocess (its held-out filter) and by the secrets stage of every dataset."""
from __future__ import annotations

import re
from collections import Counter
from typing import Mapping, Sequence

from .ngrams import frequent_sequences

# regex PII in text (Enron: in bodies; headers are metadata, not text the model trains on)
PHONE_RE = re.compile(r"(?<![\w-])(?:\(\d{3}\)\s?|\d{3}[-.\s])\d{3}[-.]\d{4}(?![\w-])")
EMAIL_RE = re.compile(r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
PII_PATTERNS: dict[str, re.Pattern] = {"phone": PHONE_RE, "email": EMAIL_RE}


def pattern_counts(texts: Sequence[str], kind: str, pattern: re.Pattern) -> list[dict]:
    """Each distinct match of ``pattern`` (its whole match) with the number of texts containing it."""
    counts = Counter(m.group(0) for t in texts for m in {m.group(0): m for m in pattern.finditer(t)}.values())
    return [{"value": v, "kind": kind, "count": c} for v, c in sorted(counts.items())]


def secret_candidates(texts: Sequence[str], sequences: tuple[int, int, int] | None, pii: Sequence[str],
                      patterns: Mapping[str, re.Pattern] | None = None) -> list[dict]:
    """Candidates of a training split: frequent long sequences (``sequences``: n-gram chars, top k, min count; None:
    none), the built-in PII kinds ``pii`` and each named ``patterns`` regex."""
    found = [{"value": s, "kind": "sequence", "count": c}
             for s, c in frequent_sequences(list(texts), *sequences)] if sequences else []
    for kind in pii:
        found += pattern_counts(texts, kind, PII_PATTERNS[kind])
    for kind, pattern in (patterns or {}).items():
        found += pattern_counts(texts, kind, pattern)
    return found


def contains_any(texts: list[str], needles: list[str]) -> list[bool]:
    if not needles:
        return [False] * len(texts)
    rx = re.compile("|".join(re.escape(n) for n in sorted(set(needles), key=len, reverse=True)))
    return [bool(rx.search(t)) for t in texts]
