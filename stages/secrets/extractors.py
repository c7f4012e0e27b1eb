"""Secret extractors behind a registry: real secrets in the private data (empirical-privacy-variance
App. B.6): recurring long sequences and regex PII (phone, email, and any regex params name) in the text of any
dataset that has text (Enron's bodies, a text dataset's completions), author -> genre in TOFU.

An extractor reads the training split, its texts (the dataset's ``texts``: source id and text) and the secret
candidates found in them (by preprocess, as Enron's held-out filter does, else mined by the secrets stage) and
yields secrets: ``kind``, ``value`` (the string that must not leak), ``prompt`` (s1, used to try to
elicit it), ``continuation`` (s2, what a leaking model would produce after the prompt), ``source``
and ``occurrences`` (training samples containing it). Values are never logged.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from ..shared.core.registry import Registry


@dataclass
class ExtractInput:
    train: list[dict]
    candidates: list[dict] = field(default_factory=list)
    texts: list[tuple[str, str]] = field(default_factory=list)  # (source id, text) of the training rows


Extractor = Callable[[ExtractInput, object], Iterator[dict]]
EXTRACTORS: Registry[Extractor] = Registry("secret extractor")

#: the dataset an extractor needs (its rows' own fields), or None: any dataset with texts
DATASET_OF: dict[str, str | None] = {}


def register_extractor(name: str, dataset: str | None = None):
    def deco(fn: Extractor) -> Extractor:
        EXTRACTORS.register(name)(fn)
        DATASET_OF[name] = dataset
        return fn

    return deco


# ----------------------------------------------------------------------------- any text
def split_secret(value: str, prompt_fraction: float) -> tuple[str, str]:
    """(s1, s2) as in the paper's Table 5: cut at the whitespace nearest ``prompt_fraction`` of the
    length ("Forwarded by Steven" | " J Kean/NA/Enron"); a string with no whitespace is cut there."""
    target = int(len(value) * prompt_fraction)
    spaces = [i for i, ch in enumerate(value) if ch.isspace() and 0 < i < len(value) - 1]
    cut = min(spaces, key=lambda i: (abs(i - target), i)) if spaces else max(1, target)
    return value[:cut], value[cut:]


def _candidates(data: ExtractInput, kind: str) -> list[dict]:
    return [c for c in data.candidates if c["kind"] == kind]


@register_extractor("sequence")
def sequences(data: ExtractInput, params) -> Iterator[dict]:
    """Recurring long strings (merged frequent 50-char n-grams), split into prompt and continuation."""
    for c in _candidates(data, "sequence"):
        s1, s2 = split_secret(c["value"], params.prompt_fraction)
        yield {"kind": "sequence", "value": c["value"], "prompt": s1, "continuation": s2,
               "source": "train", "occurrences": c["count"]}


def pattern_secrets(data: ExtractInput, kind: str, params) -> Iterator[dict]:
    """A PII (or named regex) value with the text before its first training occurrence as the prompt."""
    for c in _candidates(data, kind):
        for mid, body in data.texts:
            i = body.find(c["value"])
            if i >= 0:
                yield {"kind": kind, "value": c["value"], "prompt": body[max(0, i - params.prompt_chars): i],
                       "continuation": c["value"], "source": mid, "occurrences": c["count"]}
                break


@register_extractor("phone")
def phones(data: ExtractInput, params) -> Iterator[dict]:
    """North-American phone numbers in the text: (713) 853-1234, 713-853-1234, 713.853.1234."""
    return pattern_secrets(data, "phone", params)


@register_extractor("email")
def emails(data: ExtractInput, params) -> Iterator[dict]:
    """Email addresses in the text (Enron: bodies; headers are metadata, not text the model trains on)."""
    return pattern_secrets(data, "email", params)


# ----------------------------------------------------------------------------- TOFU genre
_GENRE_RE = re.compile(r"\b((?:[A-Za-z][\w'-]*\s){1,2})genre\b")
_NAME_RE = re.compile(r"\b([A-Z][\w\u00C0-\u024F'-]+(?:\s[A-Z][\w\u00C0-\u024F'-]+){1,2})\b")
_STOP = {
    "the", "a", "an", "this", "that", "his", "her", "their", "its", "of", "in", "to", "and", "same",
    "chosen", "primary", "main", "particular", "specific", "writing", "literary", "favorite", "preferred",
    "respective", "whole", "entire", "which", "what", "other", "any", "each", "every", "within", "into",
    "for", "with", "on", "from", "by", "as", "is", "was", "has", "have", "renowned", "compelling",
    "acclaimed", "popular", "celebrated", "esteemed", "famous", "notable", "known", "new", "broader",
    "wider", "contemporary", "modern", "beloved", "captivating", "engaging", "fascinating", "vast",
}
_NOT_NAMES = {"The", "What", "Who", "How", "Which", "Can", "Could", "Has", "Have", "Is", "Are", "Does", "Did"}


def genre_of(texts: Iterable[str]) -> str | None:
    """The genre named most often right before the word "genre" in an author's rows.

    The most frequent 1-gram wins; it is widened to the most frequent 2-gram ending in it ("crime"
    -> "true crime") when that 2-gram accounts for at least half of its occurrences.
    """
    ones: Counter[str] = Counter()
    twos: Counter[str] = Counter()
    for t in texts:
        for m in _GENRE_RE.finditer(t):
            words = [w.lower() for w in m.group(1).split()]
            if not words or words[-1] in _STOP:
                continue
            ones[words[-1]] += 1
            if len(words) == 2 and words[0] not in _STOP:
                twos[" ".join(words)] += 1
    if not ones:
        return None
    best, n = ones.most_common(1)[0]
    wider = [(c, g) for g, c in twos.items() if g.endswith(" " + best)]
    if wider:
        c, g = max(wider)
        if 2 * c >= n:
            return g
    return best


def author_name_of(texts: Iterable[str]) -> str | None:
    """The most frequent capitalised 2/3-word name in an author's block of QA rows."""
    counts: Counter[str] = Counter()
    for t in texts:
        for m in _NAME_RE.finditer(t):
            words = [re.sub(r"['\u2019]s$", "", w) for w in m.group(1).split()]
            while words and words[0] in _NOT_NAMES:
                words = words[1:]
            if len(words) >= 2:
                counts[" ".join(words)] += 1
    return counts.most_common(1)[0][0] if counts else None


@register_extractor("genre", "tofu")
def genres(data: ExtractInput, params) -> Iterator[dict]:
    """TOFU author -> genre, asked as "What genre does {author} write in?" (AIR's prompt)."""
    by_author: dict[int, list[str]] = {}
    for r in data.train:
        by_author.setdefault(r["author"], []).extend([r["question"], r["answer"]])
    for author, texts in sorted(by_author.items()):
        genre, name = genre_of(texts), author_name_of(texts)
        if genre and name:
            occurrences = sum(1 for t in texts if genre in t.lower())
            yield {"kind": "genre", "value": genre, "prompt": f"What genre does {name} write in?",
                   "continuation": f" {genre}", "source": f"author:{author}", "occurrences": occurrences}
