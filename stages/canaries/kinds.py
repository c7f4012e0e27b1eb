"""Canary kinds behind a registry (new_token, random, unigram, bigram, model_based), and one kind's canaries.

A canary is a prefix and a secret (token ids, Carlini et al. 2019). Every canary is a member with
probability ``member_prob`` from a seeded RNG (Steinke et al. 2023: the one-run audit needs each
canary's membership to be an independent coin flip). Only members are inserted into training;
all canaries are scored afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..shared.core.registry import Registry
from ..shared.core.seeds import stream


@dataclass(frozen=True)
class Vocab:
    """What a canary kind may draw tokens from."""

    base_size: int  # rows of the base model's embedding
    allowed: np.ndarray  # ordinary (non-special) token ids usable in prefixes and random secrets
    words: tuple[str, ...] = ()  # alphabetic vocabulary words (formatted one/three-word canaries)


@dataclass
class Corpus:
    """Token statistics of the fine-tuning corpus (unigram and bigram counts) for the data-aware kinds."""

    unigram: np.ndarray  # counts per token id (length: base vocabulary)
    bigram: dict[int, set[int]]  # prev token -> tokens seen right after it

    @classmethod
    def from_sequences(cls, seqs: list[list[int]], size: int) -> "Corpus":
        uni = np.zeros(size, dtype=np.int64)
        big: dict[int, set[int]] = {}
        for s in seqs:
            a = np.asarray(s, dtype=np.int64)
            a = a[a < size]
            np.add.at(uni, a, 1)
            for x, y in zip(a[:-1].tolist(), a[1:].tolist()):
                big.setdefault(x, set()).add(y)
        return cls(uni, big)

    def log_freq(self, ids) -> float:
        ids = [i for i in ids if i < len(self.unigram)]
        return float(np.mean(np.log1p(self.unigram[ids]))) if ids else 0.0


@dataclass
class KindContext:
    vocab: Vocab
    new_offset: int
    corpus: Corpus | None = None
    #: prefixes (m, L) -> log-probabilities of the next token under the base model (m, base vocab)
    next_token_logprobs: Callable[[list[list[int]]], np.ndarray] | None = None


@dataclass(frozen=True)
class KindSpec:
    """``secrets(prefixes, length, ctx, rng)`` -> (m, length) int array of secret ids."""

    name: str
    secrets: Callable[..., np.ndarray]
    #: how many new (added) token ids the kind needs for m canaries of a given secret length
    new_tokens: Callable[[int, int], int] = lambda m, length: 0
    needs: tuple[str, ...] = ()  # "corpus", "model"
    description: str = ""


CANARY_KINDS: Registry[KindSpec] = Registry("canary kind")


def register_kind(name: str, new_tokens: Callable[[int, int], int] | None = None, needs: tuple[str, ...] = (),
                  description: str = ""):
    def deco(fn):
        CANARY_KINDS.register(name)(KindSpec(name, fn, new_tokens or (lambda m, length: 0), needs, description))
        return fn

    return deco


def kind_rng(seed: int, kind: str) -> np.random.Generator:
    """Independent stream per kind: adding or removing a kind leaves the others unchanged."""
    return stream("canaries.kind").numpy(seed, key=kind)


def _rarity_order(ctx: KindContext, rng: np.random.Generator) -> np.ndarray:
    """Allowed token ids from least to most frequent in the corpus, ties in a seeded random order."""
    allowed = ctx.vocab.allowed
    counts = ctx.corpus.unigram[allowed]
    return allowed[np.lexsort((rng.random(len(allowed)), counts))]


@register_kind("new_token", new_tokens=lambda m, length: m * length,
               description="tokens added to the vocabulary, used nowhere else (seed section 3.3)")
def new_token_secrets(prefixes: np.ndarray, length: int, ctx: KindContext, rng: np.random.Generator) -> np.ndarray:
    # canary j owns new ids new_offset + j*length ... + length-1: no two canaries share a row
    m = len(prefixes)
    return (ctx.new_offset + np.arange(m * length)).reshape(m, length)


@register_kind("random", description="tokens drawn uniformly from the ordinary vocabulary (baseline)")
def random_secrets(prefixes: np.ndarray, length: int, ctx: KindContext, rng: np.random.Generator) -> np.ndarray:
    return rng.choice(ctx.vocab.allowed, size=(len(prefixes), length), replace=True)


@register_kind("unigram", needs=("corpus",),
               description="the least frequent tokens of the fine-tuning corpus, each used by one canary (section 3.2)")
def unigram_secrets(prefixes: np.ndarray, length: int, ctx: KindContext, rng: np.random.Generator) -> np.ndarray:
    m = len(prefixes)
    order = _rarity_order(ctx, rng)
    if len(order) < m * length:
        raise ValueError(f"only {len(order)} usable tokens for {m * length} unigram secret tokens")
    return rng.permutation(order[: m * length]).reshape(m, length)


@register_kind("bigram", needs=("corpus",),
               description="token chains unlikely under the corpus bigram model: each token never follows the one "
                           "before it (the last prefix token for the first), rarest such first (section 3.2)")
def bigram_secrets(prefixes: np.ndarray, length: int, ctx: KindContext, rng: np.random.Generator) -> np.ndarray:
    order = _rarity_order(ctx, rng).tolist()
    used: set[int] = set()
    out = np.zeros((len(prefixes), length), dtype=np.int64)
    for j, prefix in enumerate(prefixes):
        prev = int(prefix[-1])
        for k in range(length):
            seen_after = ctx.corpus.bigram.get(prev, set())
            tok = next(t for t in order if t not in used and t not in seen_after)
            used.add(tok)
            out[j, k] = prev = tok
    return out


@register_kind("model_based", needs=("model",),
               description="the base model's least likely next token after the prefix (chained), each used once "
                           "(section 3.2)")
def model_based_secrets(prefixes: np.ndarray, length: int, ctx: KindContext, rng: np.random.Generator) -> np.ndarray:
    seqs = [list(map(int, p)) for p in prefixes]
    allowed = np.zeros(ctx.vocab.base_size, dtype=bool)
    allowed[ctx.vocab.allowed] = True
    used = np.zeros(ctx.vocab.base_size, dtype=bool)
    out = np.zeros((len(prefixes), length), dtype=np.int64)
    for k in range(length):
        lp = ctx.next_token_logprobs(seqs)  # (m, V)
        for j in range(len(seqs)):
            row = np.where(allowed & ~used, lp[j, : ctx.vocab.base_size], np.inf)
            tok = int(np.argmin(row))
            used[tok] = True
            out[j, k] = tok
            seqs[j].append(tok)
    return out


def random_prefixes(m: int, length: int, vocab: Vocab, rng: np.random.Generator) -> np.ndarray:
    return rng.choice(vocab.allowed, size=(m, length), replace=True)


def heldout_prefixes(m: int, length: int, samples: list[list[int]], rng: np.random.Generator) -> np.ndarray:
    """The first ``length`` tokens of m distinct held-out samples (the memorization setting, section 4)."""
    usable = [s[:length] for s in samples if len(s) >= length]
    if len(usable) < m:
        raise ValueError(f"only {len(usable)} held-out samples have {length} tokens; {m} canaries need one each")
    return np.asarray([usable[i] for i in rng.choice(len(usable), m, replace=False)], dtype=np.int64)


def build_kind(kind: str, params, ctx: KindContext, prefix_samples: list[list[int]] | None = None) -> list[dict]:
    """All m canaries of one kind, with seeded memberships. Returns rows of the CANARIES schema."""
    spec = CANARY_KINDS.get(kind)
    rng = kind_rng(params.seed, kind)
    m, length = params.num_canaries, params.secret_length
    member = rng.random(m) < params.member_prob
    if params.prefix == "heldout":
        prefixes = heldout_prefixes(m, params.prefix_length, prefix_samples or [], rng)
    else:
        prefixes = random_prefixes(m, params.prefix_length, ctx.vocab, rng)
    secrets = spec.secrets(prefixes, length, ctx, rng)
    corpus = ctx.corpus
    return [
        {
            "canary_id": f"{kind}-{j:05d}",
            "kind": kind,
            "index": j,
            "prefix_ids": prefixes[j].astype(np.int32).tolist(),
            "secret_ids": secrets[j].astype(np.int32).tolist(),
            "member": bool(member[j]),
            "prefix_log_freq": corpus.log_freq(prefixes[j].tolist()) if corpus else 0.0,
            "secret_log_freq": corpus.log_freq(secrets[j].tolist()) if corpus else 0.0,
        }
        for j in range(m)
    ]
