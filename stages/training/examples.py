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
    """(prompt, reply) per turn: persona and partner utterance -> the persona owner's reply.
    SFT masks the prompt (the persona is not learned), as in the seed's PersonaChat setting."""
    pairs = []
    for d in dialogues:
        persona = " ".join(d["persona"])
        for partner, reply in zip(d["partner"], d["self"]):
            pairs.append((f"your persona: {persona}\npartner: {partner}\nyou:", f" {reply}"))
    return pairs


def tofu_pairs(rows: list[dict]) -> list[tuple[str, str]]:
    """TOFU QA (App. B.3): question -> answer; SFT puts the loss on the answer only."""
    return [(f"Question: {r['question']}\nAnswer:", f" {r['answer']}") for r in rows]


def enron_pairs(rows: list[dict]) -> list[tuple[str, str]]:
    """Enron: the whole email body is the target (utility and leakage are measured on full samples)."""
    return [("", r["body"]) for r in rows]


#: processed dataset -> (prompt, target) pairs for fine-tuning
PAIRS = {"personachat": personachat_pairs, "tofu": tofu_pairs, "enron": enron_pairs, "enron_users": enron_pairs}


def text_examples(pairs: list[tuple[str, str]], tokenizer, max_length: int, objective: str) -> list[Example]:
    """Tokenize (prompt, reply) pairs; the reply keeps up to half the budget, the prompt its tail."""
    out = []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    for prompt, reply in pairs:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else []
        r = tokenizer(reply, add_special_tokens=False)["input_ids"] + eos
        if not p:  # no prompt: the whole text is the target, predicted from a BOS token
            p, r = [bos], r[: max_length - 1]
        else:
            r = r[: max_length // 2]
            p = p[-(max_length - len(r)):]
        out.append(make_example(p, r, objective, "text"))
    return out


def sample(items: list, n: int, seed: int) -> list:
    """A seeded sample of n items (all of them, shuffled, if n >= len)."""
    order = np.random.default_rng(seed).permutation(len(items))
    return [items[i] for i in order[: min(n, len(items))]]
