"""Memorization of real secrets (empirical-privacy-variance section 3.1, App. B.7).

VMR: prompt with the secret's prefix s1, draw 10 samples (temperature 1, top-k 50, top-p 1,
max_new_tokens = the token length of s2); VMR = share of samples equal to s2.
AIR: ask "What genre does {author} write in?" in the fine-tuning QA format, 10 samples of at most 20
tokens; AIR = 1 if the genre appears in any of them.

Both are computed for the fine-tuned and for the reference (base) model, so the report can subtract
base-model leakage, and for secrets the run trained on and those it did not (a control). With
``finetune.secret_control`` (the default) a seeded coin per secret decided which were trained on, so the
difference is attributable to training; otherwise ``trained`` means the value occurs in one of the run's
training rows, a comparison confounded by frequency.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..secrets.schema import read_secrets
from ..shared.lm.generate import generate
from .registry import register_attack
from .schema import MEMORIZATION

#: the kinds that are attributes of a subject, not strings of the text (AIR's); every other kind is verbatim text
ATTRIBUTE_KINDS = ("genre",)


def select_secrets(ctx, params, kinds: tuple[str, ...] | None) -> tuple[list[dict], list[bool]]:
    """The secrets of the kinds scored (None: every verbatim kind, i.e. not an attribute: sequences, PII and the
    named patterns of a text dataset): at most ``max_secrets`` trained ones and as many held-out ones as a control,
    each arm a seeded random draw (``generation.arm_seed``) from its secrets, never the file's order (the secrets
    file is sorted by frequency, so "the first n" would make the control the most frequent secrets).
    Which secrets were trained on is the run's manifest: with its randomised control (finetune.secret_control)
    the control's coins; without it, whether the run's training rows contained each secret (frequency-confounded:
    the report says so)."""
    trained_of = ctx.membership("secret")
    secrets = [s for s in read_secrets(ctx.where.secrets, ctx.dataset.secrets)
               if (s["kind"] in kinds if kinds else s["kind"] not in ATTRIBUTE_KINDS) and s["secret_id"] in trained_of]
    trained = [trained_of[s["secret_id"]] for s in secrets]
    cap = params.generation.max_secrets
    idx_t, idx_u = draw_arms(trained, cap, params.generation.arm_seed)
    keep = idx_t + idx_u
    return [secrets[i] for i in keep], [trained[i] for i in keep]


def draw_arms(trained: list[bool], cap: int, seed: int) -> tuple[list[int], list[int]]:
    """Indices of the trained arm (at most ``cap``) and of the control arm (as many as the trained arm, at least
    one; ``cap`` without trained secrets), each a seeded uniform draw without replacement, in index order."""
    rng = np.random.default_rng(seed)
    pick = lambda idx, n: sorted(rng.choice(idx, size=min(n, len(idx)), replace=False).tolist()) if idx else []  # noqa: E731
    idx_t = pick([i for i, t in enumerate(trained) if t], cap)
    idx_u = pick([i for i, t in enumerate(trained) if not t], max(len(idx_t), 1) if idx_t else cap)
    return idx_t, idx_u


def sampled_rates(model, tok, prompts: list[list[int]], max_new: list[int], targets: list[str], match, gen_params,
                  batch_size: int) -> list[float]:
    """For each prompt: ``match(decoded samples, target)`` over ``gen_params.samples`` sampled continuations
    of at most ``max_new[i]`` tokens (prompts grouped by length so each gets its own budget). A sample ends at the
    tokenizer's end-of-sequence token, where every trained reply ended: what a model writes after it is not its
    answer (a base model's chat-template text there named genres of its own)."""
    g = gen_params
    by_len: dict[int, list[int]] = {}
    for i, n in enumerate(max_new):
        by_len.setdefault(n, []).append(i)
    res: dict[int, float] = {}
    for n, idx in sorted(by_len.items()):
        samples = generate(model, [prompts[i] for i in idx], n, num_samples=g.samples, temperature=g.temperature,
                           top_k=g.top_k, top_p=g.top_p, seed=g.seed, pad_id=tok.pad_token_id, batch_size=batch_size)
        for i, smp in zip(idx, samples):
            res[i] = match([tok.decode(until_eos(s, tok.eos_token_id), skip_special_tokens=True) for s in smp],
                           targets[i])
    return [res[i] for i in range(len(prompts))]


def until_eos(ids: list[int], eos: int | None) -> list[int]:
    """``ids`` up to (without) the first ``eos``; all of them when there is none."""
    return ids[:ids.index(eos)] if eos is not None and eos in ids else ids


def verbatim_share(texts: list[str], target: str) -> float:
    """VMR of one secret: the share of samples equal to the continuation."""
    return float(np.mean([t.strip() == target.strip() for t in texts]))


def attribute_hit(texts: list[str], value: str) -> float:
    """AIR of one author: 1 if the attribute appears in any sample."""
    return float(any(value.lower() in t.lower() for t in texts))


def memorization_table(secrets, trained, score, base) -> pa.Table:
    return pa.Table.from_pylist([{"secret_id": s["secret_id"], "kind": s["kind"], "trained": t, "score": float(a),
                                  "base_score": float(b)} for s, t, a, b in zip(secrets, trained, score, base)],
                                schema=MEMORIZATION)


@register_attack("vmr", "memorization", ("secrets:text",),
                 "verbatim memorization ratio: share of 10 sampled continuations of s1 equal to s2",
                 threat_model="black-box generation")
def vmr(ctx, params) -> pa.Table:
    tok = ctx.tokenizer
    secrets, trained = select_secrets(ctx, params, None)
    prompts = [tok(s["prompt"], add_special_tokens=False)["input_ids"][-256:] or [tok.eos_token_id] for s in secrets]
    lens = [max(1, len(tok(s["continuation"], add_special_tokens=False)["input_ids"])) for s in secrets]
    conts = [s["continuation"] for s in secrets]
    rate = lambda m: sampled_rates(m, tok, prompts, lens, conts, verbatim_share, params.generation,  # noqa: E731
                                   params.batch_size)
    return memorization_table(secrets, trained, rate(ctx.target_model), rate(ctx.reference_model))


@register_attack("air", "memorization", ("secrets:tofu",),
                 "attribute inference rate: the genre appears in any of 10 sampled answers of <= 20 tokens",
                 threat_model="black-box generation")
def air(ctx, params) -> pa.Table:
    tok = ctx.tokenizer
    secrets, trained = select_secrets(ctx, params, ("genre",))
    prompts = [tok(f"Question: {s['prompt']}\nAnswer:", add_special_tokens=False)["input_ids"] for s in secrets]
    n = [params.generation.air_max_new_tokens] * len(prompts)
    genres = [s["value"] for s in secrets]
    rate = lambda m: sampled_rates(m, tok, prompts, n, genres, attribute_hit, params.generation,  # noqa: E731
                                   params.batch_size)
    return memorization_table(secrets, trained, rate(ctx.target_model), rate(ctx.reference_model))
