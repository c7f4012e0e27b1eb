"""Canary kinds behind a registry, and the construction of a canary set.

A canary is a prefix and a secret (token ids, Carlini et al. 2019). Every canary is a member with
probability ``member_prob`` from a seeded RNG (Steinke et al. 2023: the one-run audit needs each
canary's membership to be an independent coin flip). Only members are inserted into training;
all canaries are scored afterwards.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..registry import Registry


@dataclass(frozen=True)
class Vocab:
    """What a canary kind may draw tokens from."""

    base_size: int  # rows of the base model's embedding
    allowed: np.ndarray  # ordinary (non-special) token ids usable in prefixes and random secrets
    words: tuple[str, ...] = ()  # alphabetic vocabulary words (formatted one/three-word canaries)


@dataclass(frozen=True)
class KindSpec:
    """``secrets(m, length, vocab, rng, new_offset)`` -> (m, length) int array of secret ids."""

    name: str
    secrets: Callable[..., np.ndarray]
    #: how many new (added) token ids the kind needs for m canaries of a given secret length
    new_tokens: Callable[[int, int], int] = lambda m, length: 0
    description: str = ""


CANARY_KINDS: Registry[KindSpec] = Registry("canary kind")


def register_kind(name: str, new_tokens: Callable[[int, int], int] | None = None, description: str = ""):
    def deco(fn):
        CANARY_KINDS.register(name)(KindSpec(name, fn, new_tokens or (lambda m, length: 0), description))
        return fn

    return deco


def kind_rng(seed: int, kind: str) -> np.random.Generator:
    """Independent stream per kind: adding or removing a kind leaves the others unchanged."""
    return np.random.default_rng([seed, zlib.crc32(kind.encode())])


@register_kind("new_token", new_tokens=lambda m, length: m * length,
               description="secret = tokens added to the vocabulary, used nowhere else (seed section 3.3)")
def new_token_secrets(m: int, length: int, vocab: Vocab, rng: np.random.Generator, new_offset: int) -> np.ndarray:
    # canary j owns new ids new_offset + j*length ... + length-1: no two canaries share a row
    return (new_offset + np.arange(m * length)).reshape(m, length)


@register_kind("random", description="secret = tokens drawn uniformly from the ordinary vocabulary (baseline)")
def random_secrets(m: int, length: int, vocab: Vocab, rng: np.random.Generator, new_offset: int) -> np.ndarray:
    return rng.choice(vocab.allowed, size=(m, length), replace=True)


def random_prefixes(m: int, length: int, vocab: Vocab, rng: np.random.Generator) -> np.ndarray:
    return rng.choice(vocab.allowed, size=(m, length), replace=True)


def build_kind(kind: str, params, vocab: Vocab, new_offset: int) -> list[dict]:
    """All m canaries of one kind, with seeded memberships. Returns rows of the CANARIES schema."""
    spec = CANARY_KINDS.get(kind)
    rng = kind_rng(params.seed, kind)
    m, length = params.num_canaries, params.secret_length
    member = rng.random(m) < params.member_prob
    prefixes = random_prefixes(m, params.prefix_length, vocab, rng)
    secrets = spec.secrets(m, length, vocab, rng, new_offset)
    return [
        {
            "canary_id": f"{kind}-{j:05d}",
            "kind": kind,
            "index": j,
            "prefix_ids": prefixes[j].astype(np.int32).tolist(),
            "secret_ids": secrets[j].astype(np.int32).tolist(),
            "member": bool(member[j]),
        }
        for j in range(m)
    ]
