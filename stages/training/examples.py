"""Training/scoring examples: token ids plus a label per position (-100 = no loss there).

``labels[t]`` is the token the model must predict *at* position t, i.e. from ids[:t]. Only
positions t >= 1 can carry a label. SFT masks the prompt (persona, partner turn, canary prefix);
NWP labels every position.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IGNORE = -100


@dataclass(frozen=True)
class Example:
    ids: np.ndarray  # int64 (T,)
    labels: np.ndarray  # int64 (T,), IGNORE where no loss
    source: str  # "text" | "canary:<kind>"

    def __len__(self) -> int:
        return len(self.ids)


def make_example(prompt: list[int], target: list[int], objective: str, source: str) -> Example:
    ids = np.asarray(list(prompt) + list(target), dtype=np.int64)
    labels = ids.copy()
    labels[0] = IGNORE
    if objective == "sft":
        labels[: len(prompt)] = IGNORE
    elif objective != "nwp":
        raise ValueError(f"unknown objective {objective!r}")
    return Example(ids, labels, source)


def canary_examples(rows: list[dict], objective: str) -> list[Example]:
    """SFT: loss on the secret only (the seed's prefix-LM objective); NWP: the whole canary."""
    return [make_example(r["prefix_ids"], r["secret_ids"], objective, f"canary:{r['kind']}") for r in rows]


def personachat_pairs(dialogues: list[dict]) -> list[tuple[str, str]]:
    """(prompt, reply) per turn: persona and partner utterance -> the persona owner's reply."""
    pairs = []
    for d in dialogues:
        persona = " ".join(d["persona"])
        for partner, reply in zip(d["partner"], d["self"]):
            pairs.append((f"your persona: {persona}\npartner: {partner}\nyou:", f" {reply}"))
    return pairs


def text_examples(pairs: list[tuple[str, str]], tokenizer, max_length: int, objective: str) -> list[Example]:
    """Tokenize (prompt, reply) pairs; the reply keeps up to half the budget, the prompt its tail."""
    out = []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    for prompt, reply in pairs:
        r = (tokenizer(reply, add_special_tokens=False)["input_ids"] + eos)[: max_length // 2]
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        p = p[-(max_length - len(r)):]
        out.append(make_example(p, r, objective, "text"))
    return out


def sample(items: list, n: int, seed: int) -> list:
    """A seeded sample of n items (all of them, shuffled, if n >= len)."""
    order = np.random.default_rng(seed).permutation(len(items))
    return [items[i] for i in order[: min(n, len(items))]]
