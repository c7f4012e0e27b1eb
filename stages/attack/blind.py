"""Blind baselines: a model-free membership attack on every pool whose membership is not randomised by
construction (Das, Zhang & Tramèr 2024, "Blind Baselines Beat Membership Inference Attacks for Foundation
Models"; Duan et al. 2024).

A text MIA compares trained rows with held-out rows, user inference held-in with held-out users: if the two
sides differ in distribution (length, format, dates, topic), a classifier that never sees the model tells
them apart, and a model-based attack's AUROC on that pool measures the shift, not leakage. Here a
cross-validated scikit-learn classifier (logistic regression on character 1-3-gram TF-IDF plus length and
format features) scores each item out of fold; the audit stage tests its AUROC against chance and marks the
pool's MIA invalid when it is significantly above it. Randomised pools (canaries, formatted canaries,
canary users, the VMR/AIR control) need no baseline: their membership is a coin.

``feature_differences`` says what differs, with numeric features only (no n-gram of the private text is
ever reported).
"""
from __future__ import annotations

import hashlib
import re
from typing import Sequence

import numpy as np
import pyarrow as pa

from .registry import register_attack

_DATE = re.compile(r"\b(?:\d{1,4}[/-]\d{1,2}[/-]\d{1,4}"
                   r"|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d{1,2}"
                   r"|(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*,?\s)", re.IGNORECASE)
_ADDRESS = re.compile(r"\S+@\S+|https?://\S+|www\.\S+", re.IGNORECASE)
_NUMBER = re.compile(r"\d+")

#: the length and format features (each a function of the text alone)
FEATURES = ("log characters", "log words", "lines", "digit share", "uppercase share", "punctuation share",
            "dates", "addresses (email/URL)", "numbers")


def numeric_features(texts: Sequence[str]) -> np.ndarray:
    """(n, len(FEATURES)) length and format features of each text."""
    out = np.zeros((len(texts), len(FEATURES)))
    for i, t in enumerate(texts):
        n = max(len(t), 1)
        out[i] = [np.log1p(len(t)), np.log1p(len(t.split())), t.count("\n"), sum(c.isdigit() for c in t) / n,
                  sum(c.isupper() for c in t) / n, sum(not c.isalnum() and not c.isspace() for c in t) / n,
                  len(_DATE.findall(t)), len(_ADDRESS.findall(t)), len(_NUMBER.findall(t))]
    return out


def classifier(seed: int):
    """Character n-grams + length/format features -> logistic regression (a scikit-learn pipeline)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import FeatureUnion, make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    features = FeatureUnion([
        ("char_ngrams", TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3), sublinear_tf=True, min_df=2,
                                        max_features=20000)),
        ("length_format", make_pipeline(FunctionTransformer(numeric_features), StandardScaler())),
    ])
    return make_pipeline(features, LogisticRegression(C=1.0, max_iter=2000, random_state=seed))


def blind_scores(texts: Sequence[str], members: Sequence[bool], folds: int, seed: int) -> np.ndarray | None:
    """Out-of-fold P(member | text) of ``classifier`` under stratified k-fold cross-validation (k = ``folds``,
    fewer if a side has fewer items); None when a side has fewer than two items."""
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    y = np.asarray(members, dtype=bool)
    k = min(folds, int(y.sum()), int((~y).sum()))
    if k < 2:
        return None
    cv = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return cross_val_predict(classifier(seed), list(texts), y, cv=cv, method="predict_proba")[:, 1]


def feature_differences(texts: Sequence[str], members: Sequence[bool]) -> list[dict]:
    """Per length/format feature: member and non-member means and the standardised difference (Cohen's d,
    pooled SD), largest |d| first."""
    x = numeric_features(texts)
    y = np.asarray(members, dtype=bool)
    out = []
    for j, name in enumerate(FEATURES):
        a, b = x[y, j], x[~y, j]
        sd = np.sqrt((a.var(ddof=1) * (len(a) - 1) + b.var(ddof=1) * (len(b) - 1)) / max(len(a) + len(b) - 2, 1)) \
            if len(a) > 1 and len(b) > 1 else 0.0
        d = float((a.mean() - b.mean()) / sd) if sd > 0 else 0.0
        out.append({"feature": name, "members": float(a.mean()), "non_members": float(b.mean()), "d": d})
    return sorted(out, key=lambda r: -abs(r["d"]))


def pool_fingerprint(item_ids: Sequence[str], texts: Sequence[str], members: Sequence[bool]) -> str:
    """A pool's identity: sha1 over its (item id, member, sha1 of the text) rows in id order. Two runs that score
    the same rows with the same labels (nondp and dp_eps8 share their text pool) get the same fingerprint, so the
    shift check tests that pool once. Only hashes leave: no text can be read back from it."""
    h = hashlib.sha1()
    for i, m, t in sorted(zip(item_ids, members, texts)):
        h.update(f"{i}\t{int(bool(m))}\t{hashlib.sha1(t.encode()).hexdigest()}\n".encode())
    return h.hexdigest()


def pools(ctx) -> dict[str, tuple[list[str], list[str], list[bool]]]:
    """The run's non-randomised pools: group -> (item ids, texts, members). Text rows as scored; users as the
    concatenation of each real (non-canary) user's attacker samples."""
    out = {}
    text = ctx.items("text", optional=True)
    if text:
        out["text"] = ([it.item_id for it in text], [it.text for it in text], [it.member for it in text])
    users = [it for it in ctx.items("users", optional=True) if it.group == "users"]
    if users:
        by_user: dict[str, list] = {}
        for it in users:
            by_user.setdefault(it.user, [it.member, []])[1].append(it.text)
        names = sorted(by_user)
        out["users"] = (names, ["\n\n".join(by_user[u][1]) for u in names], [by_user[u][0] for u in names])
    return out


@register_attack("blind", "membership", ("text",),
                 "model-free: cross-validated classifier on the text alone (length, format, character n-grams)",
                 threat_model="none: never queries the model", baseline=True)
def blind(ctx, params) -> tuple[pa.Table, dict]:
    from .scores import table

    ids, groups, members, scores, about = [], [], [], [], {}
    for group, (item_ids, texts, member) in pools(ctx).items():
        s = blind_scores(texts, member, params.blind.folds, params.blind.seed)
        about[group] = {"items": len(texts), "scored": s is not None, "folds": params.blind.folds,
                        "pool": pool_fingerprint(item_ids, texts, member),
                        "differences": feature_differences(texts, member)}
        if s is not None:
            ids += item_ids
            groups += [group] * len(item_ids)
            members += list(member)
            scores += s.tolist()
    return table(ids, groups, members, scores), about
