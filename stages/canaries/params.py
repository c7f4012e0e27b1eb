"""Params of ``canaries`` (the ``canaries`` section)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..shared.core.params import check
from ..shared.datasets import dataset_names, get_dataset
from .audit_users import AuditUsersParams


def _dataset(raw: dict, name: str, key: str, users: bool = False) -> list[tuple[str, str]]:
    known = [d for d in dataset_names(raw) if get_dataset(d, raw).users or not users]
    return check(name in known, key, f"must be a dataset{' with users' if users else ''} ({', '.join(known)})", name)


@dataclass(frozen=True)
class CanaryChecks:
    #: false-alarm rate of the member-share guard: a two-sided binomial test of the share of members against
    #: ``member_prob`` at this kind's m (a fixed band would refuse fair coins at a rate that depends on m)
    member_share_alpha: float

    def problems(self):
        return check(0 < self.member_share_alpha < 0.5, "member_share_alpha", "must be in (0, 0.5)",
                     self.member_share_alpha)


@dataclass(frozen=True)
class FormattedParams:
    """Secret-sharer formatted canaries for the exposure attack (privlm-bench Table 4)."""

    enabled: bool
    formats: tuple[Literal["name", "city", "email", "phone", "letters", "one_word", "three_words"], ...]
    #: |R| per format (the paper: 80/80/70/100/100/100/100)
    candidates: int
    inserted_fraction: float
    #: the i-th inserted candidate is repeated repetition_step * i times (the paper: 10)
    repetition_step: int
    seed: int

    def problems(self):
        return (check(2 <= self.candidates <= 80, "candidates", "must be in [2, 80] (the name and city lists have 80)",
                      self.candidates)
                + check(0 < self.inserted_fraction < 1, "inserted_fraction", "must be in (0, 1)",
                        self.inserted_fraction)
                + check(self.repetition_step >= 1, "repetition_step", "must be >= 1", self.repetition_step))


@dataclass(frozen=True)
class CanaryUsersParams:
    """Canary users (user-inference-attacks Algorithm 1): real users whose every document carries a
    shared substring, for the worst case of user inference."""

    enabled: bool
    #: substring lengths in tokens, and how many canary users per length (half held in by a seeded permutation)
    lengths: tuple[int, ...]
    per_length: int
    #: a held-in canary user's trained documents at most, the values given in turn to a length's held-in users
    #: (null: all of the user's trainable documents)
    documents: tuple[int | None, ...]
    #: a dataset with users (canary users off: any preprocessed one, as the canaries stage depends on its folder)
    dataset: str
    seed: int

    def problems(self):
        return (check(all(length > 0 for length in self.lengths), "lengths", "must be > 0", self.lengths)
                + check(self.per_length >= 2, "per_length", "must be >= 2 (half of a length's canary users are held "
                        "in; a length needs a member and a non-member for its AUROC)", self.per_length)
                + check(len(self.documents) >= 1 and all(d is None or d >= 1 for d in self.documents), "documents",
                        "must list counts >= 1 or null (all)", self.documents)
                + check(self.per_length // 2 >= len(self.documents), "documents",
                        "needs a held-in canary user per count (per_length // 2 >= its length)", self.documents))


@dataclass(frozen=True)
class CanaryParams:
    out_dir: str
    #: the reference (base) model's per-position log-probabilities of every canary (REFERENCE)
    reference_out: str
    seed: int
    kinds: tuple[str, ...]
    num_canaries: int
    member_prob: float
    #: random tokens (the audit setting, seed section 5) or the first tokens of held-out samples of the
    #: corpus (the memorization setting, section 4)
    prefix: Literal["random", "heldout"]
    #: the fine-tuning corpus: its token counts drive the unigram/bigram kinds, its held-out splits the prefixes
    corpus: str
    prefix_length: int
    secret_length: int
    new_token_init: Literal["mean", "zero"]
    checks: CanaryChecks
    formatted: FormattedParams
    users: CanaryUsersParams
    #: the user-level one-run audit's canary users (``audit_users.py``), trained on by runs with finetune.user_canaries
    audit_users: AuditUsersParams

    def problems(self):
        return (
            check(len(self.kinds) > 0, "kinds", "needs at least one kind", self.kinds)
            + check(len(set(self.kinds)) == len(self.kinds), "kinds", "kinds must be distinct", self.kinds)
            + check(self.num_canaries > 0, "num_canaries", "must be > 0", self.num_canaries)
            + check(0 < self.member_prob < 1, "member_prob", "must be in (0, 1)", self.member_prob)
            + check(self.prefix_length > 0, "prefix_length", "must be > 0", self.prefix_length)
            + check(1 <= self.secret_length <= 8, "secret_length", "must be in [1, 8]", self.secret_length)
        )

    def relations(self, raw: dict) -> list[tuple[str, str]]:
        """The corpus and the canary users' dataset are datasets of these params (registered or declared), the
        latter with users where canary users are drawn (disabled, any: the stage still depends on its folder)."""
        return [(f"canaries.{k}", m) for k, m in _dataset(raw, self.corpus, "corpus")
                + _dataset(raw, self.users.dataset, "users.dataset", users=self.users.enabled)]
