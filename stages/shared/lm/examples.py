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


def text_examples(pairs: list[tuple[str, str]], tokenizer, max_length: int, objective: str) -> list[Example]:
    """Tokenize (prompt, reply) pairs; the reply keeps up to half the budget, the prompt its tail."""
    out = []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    bos = bos_id(tokenizer)
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


def bos_id(tokenizer) -> int:
    """The token a text with no prompt is predicted from: BOS, or EOS where the tokenizer has no BOS."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
