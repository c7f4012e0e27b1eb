"""Frequent long character sequences (empirical-privacy-variance App. B.6, Enron):

histogram of character n-grams (n = 50) over the training texts, the top-k most frequent ones
(by the number of samples containing them), then overlapping n-grams are merged into maximal,
non-overlapping sequences: in every sample the windows of top-k n-grams are unioned into
intervals, and a resulting string contained in a longer one is dropped. What remains are the long
strings that recur verbatim across samples (signatures, phone/fax blocks, "Forwarded by" lines).

Counting uses a polynomial rolling hash over all texts at once (numpy, no Python loop over
windows), so the full 33k-email training set costs seconds; the top-k windows are then checked
by their actual text, so hash collisions cannot create a candidate.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

_BASE = np.uint64(1_000_003)


def _window_hashes(codes: np.ndarray, n: int) -> np.ndarray:
    """uint64 polynomial hash of every length-n window of ``codes`` (wrapping arithmetic)."""
    L = len(codes) - n + 1
    h = np.zeros(L, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            h = h * _BASE + codes[k:k + L]
    return h


def frequent_sequences(texts: Sequence[str], n: int = 50, top_k: int = 500,
                       min_count: int = 2) -> list[tuple[str, int]]:
    """Maximal recurring sequences built from the top-k char n-grams; (string, #samples containing it)."""
    docs = [t for t in texts if len(t) >= n]
    if not docs:
        return []
    # windows of each text, hashed per text (no window crosses a text boundary)
    hs, ds, ps = [], [], []
    for d, t in enumerate(docs):
        codes = np.frombuffer(t.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
        h = _window_hashes(codes, n)
        hs.append(h)
        ds.append(np.full(len(h), d, dtype=np.int64))
        ps.append(np.arange(len(h), dtype=np.int64))
    h, doc_of, pos = np.concatenate(hs), np.concatenate(ds), np.concatenate(ps)
    # document frequency of each hash: unique (hash, doc) pairs, then count per hash
    order = np.lexsort((doc_of, h))
    hs_sorted, ds_sorted = h[order], doc_of[order]
    first_pair = np.r_[True, (hs_sorted[1:] != hs_sorted[:-1]) | (ds_sorted[1:] != ds_sorted[:-1])]
    uh, df = np.unique(hs_sorted[first_pair], return_counts=True)
    keep = df >= min_count
    uh, df = uh[keep], df[keep]
    if not len(uh):
        return []
    top = np.sort(uh[np.lexsort((uh, -df))[:top_k]])  # most frequent first, ties by hash
    hit = np.flatnonzero(np.isin(h, top))
    counts: Counter[str] = Counter()
    bounds = np.flatnonzero(np.diff(doc_of[hit])) + 1
    for group in np.split(hit, bounds):  # hits of one text, in position order
        d = int(doc_of[group[0]])
        text, p = docs[d], pos[group]
        seqs = set()
        lo, hi = int(p[0]), int(p[0]) + n
        for s in p[1:]:
            s = int(s)
            if s <= hi:  # overlapping or adjacent windows merge
                hi = max(hi, s + n)
            else:
                seqs.add(text[lo:hi].strip())
                lo, hi = s, s + n
        seqs.add(text[lo:hi].strip())
        counts.update(seqs)
    kept: list[str] = []
    for s in sorted(counts, key=lambda x: (-len(x), x)):
        if len(s) >= n and not any(s in longer for longer in kept):
            kept.append(s)
    # a sequence's count: samples containing it verbatim (also inside a longer occurrence)
    result = [(s, sum(1 for t in docs if s in t)) for s in kept]
    return sorted([r for r in result if r[1] >= min_count], key=lambda r: (-r[1], r[0]))
