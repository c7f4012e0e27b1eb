"""Build the canary set: every kind's canaries (schema- and GX-checked, with reference log-probabilities),
the secret-sharer formatted canaries and meta.json."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa

from ..shared.core.errors import ConfigError, DataError
from ..shared.core.gx import check_suites
from ..shared.core.io import write_json, write_table
from ..shared.datasets import DatasetSpec, read_split
from ..shared.lm.canary_lm import CanaryLM
from ..shared.lm.examples import make_example
from ..shared.lm.loading import load_base, pick_device
from ..shared.lm.scoring import token_logprobs
from .audit_users import write_audit_users
from .checks import canary_suite
from .formatted import build_formatted
from .kinds import CANARY_KINDS, Corpus, KindContext, KindSpec, Vocab, build_kind
from .schema import AUDIT_USERS_KIND, CANARIES, FORMATTED, FORMATTED_FILE, META, REFERENCE, kind_path

log = logging.getLogger("stages.canaries")


def vocab_of(model_dir: Path, tok) -> Vocab:
    """Base vocabulary size and the ordinary token ids of the base model's tokenizer (special and added
    tokens excluded)."""
    import numpy as np

    base_size = int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])
    excluded = set(tok.all_special_ids) | set(getattr(tok, "added_tokens_decoder", {}) or {})
    usable = min(len(tok), base_size)
    allowed = np.array([i for i in range(usable) if i not in excluded], dtype=np.int64)
    words = sorted({w for w in (tok.decode([int(i)]).strip() for i in allowed) if w.isalpha() and len(w) >= 3})
    return Vocab(base_size=base_size, allowed=allowed, words=tuple(words))


def reference_logprobs(rows: list[dict], model_dir: Path, num_new: int, init: str, batch_size: int = 64) -> list[dict]:
    """REFERENCE rows: every position's log-probability of each canary under the reference model (the
    base model plus the new-token rows at their initial values, i.e. the model before fine-tuning).
    Attacks use it for reference-calibrated scores; the canary sanity check compares it across members."""
    device = pick_device("auto")
    base, tok = load_base(model_dir, device)
    model = CanaryLM(base, num_new=num_new, init=init).to(device)
    examples = [make_example(r["prefix_ids"], r["secret_ids"], "nwp", r["kind"]) for r in rows]
    lps = token_logprobs(model, examples, tok.pad_token_id, batch_size, desc="reference scores")
    return [{"canary_id": r["canary_id"], "base_token_logprobs": lp.astype("float32").tolist()}
            for r, lp in zip(rows, lps)]


def corpus_texts(processed_dir: Path, spec: DatasetSpec, splits, tok, targets_only: bool = False) -> list[list[int]]:
    """Token ids of a processed dataset's fine-tuning texts (prompt + target, or the target alone)."""
    out = []
    for split in splits:
        texts = [t if targets_only else p + t for p, t in spec.pairs(read_split(processed_dir, spec, split))]
        out += tok(texts, add_special_tokens=False)["input_ids"]
    return out


def base_next_token(model_dir: Path, batch_size: int = 64):
    """prefixes -> log p(next token | prefix) under the base model, (m, V) float32 (lazy model load)."""
    state: dict = {}

    def score(seqs: list[list[int]]):
        import numpy as np
        import torch

        if not state:
            base, _ = load_base(model_dir)
            state["model"] = CanaryLM(base).eval()
        model = state["model"]
        out = []
        with torch.no_grad():
            for s in range(0, len(seqs), batch_size):
                ids = torch.tensor([q for q in seqs[s:s + batch_size]])  # equal lengths by construction
                hidden, new_logits = model(ids)
                rows = torch.arange(len(ids))
                lp = model.logits_at(hidden, new_logits, rows, torch.full_like(rows, ids.shape[1] - 1)).float()
                out.append(lp.log_softmax(-1).numpy())
        return np.concatenate(out)

    return score


def build_kinds(params, vocab: Vocab, corpus: Corpus | None, scorer, prefix_samples) -> tuple[dict, dict]:
    """kind -> canary rows, and kind -> its meta.json entry; new-token ids are handed out kind after kind."""
    specs: list[KindSpec] = [CANARY_KINDS.get(k, key=f"canaries.kinds[{i}]") for i, k in enumerate(params.kinds)]
    offset = vocab.base_size
    rows_of, meta = {}, {}
    for i, spec in enumerate(specs):
        if "corpus" in spec.needs and corpus is None or "model" in spec.needs and scorer is None:
            raise ConfigError(f"canaries.kinds[{i}]: kind {spec.name!r} needs the {spec.needs[0]} it is built from")
        n_new = spec.new_tokens(params.num_canaries, params.secret_length)
        try:
            rows = build_kind(spec.name, params, KindContext(vocab, offset, corpus, scorer), prefix_samples)
        except ValueError as exc:
            raise DataError(f"canaries.kinds[{i}] ({spec.name}): {exc}") from None
        rows_of[spec.name] = rows
        meta[spec.name] = {
            "m": len(rows), "members": sum(r["member"] for r in rows), "prefix_length": params.prefix_length,
            "secret_length": params.secret_length, "new_token_offset": offset if n_new else None,
            "new_tokens": n_new, "description": spec.description,
            "distinct_secret_tokens": len({t for r in rows for t in r["secret_ids"]}),
        }
        offset += n_new
        log.info("canaries: built %s", spec.name)
    return rows_of, meta


def write_formatted(params, words: tuple[str, ...], out_dir: Path) -> dict:
    """The secret-sharer canaries (formatted.parquet) and their meta.json entry."""
    rows = build_formatted(params, words)
    write_table(pa.Table.from_pylist(rows, schema=FORMATTED), out_dir / FORMATTED_FILE, FORMATTED)
    return {"formats": list(params.formats), "candidates": params.candidates,
            "inserted": sum(r["inserted"] for r in rows), "inserted_rows": sum(r["repetitions"] for r in rows)}


def build_canaries(params, vocab: Vocab, out_dir: Path, where: str = "data/canaries", model_dir: Path | None = None,
                   corpus: Corpus | None = None, prefix_samples=None, reference_out: Path | None = None,
                   reference: bool = True, audit_users: bool = True) -> dict:
    """Write every kind's canaries (schema- and GX-checked) and meta.json into ``out_dir``, and with
    ``reference_out`` their reference log-probabilities there (REFERENCE; empty lists without ``model_dir``).

    ``corpus`` (token statistics of the fine-tuning data) is needed by the unigram/bigram kinds,
    ``model_dir`` by model-based canaries and the reference log-probabilities every canary gets,
    ``prefix_samples`` by held-out prefixes; ``reference`` false: empty reference lists (a replica whose attacks
    read none); ``audit_users`` false: no audit users even where params enable them (a replica's)."""
    scorer = base_next_token(model_dir) if model_dir is not None else None
    rows_of, kinds_meta = build_kinds(params, vocab, corpus, scorer, prefix_samples)
    num_new = sum(k["new_tokens"] for k in kinds_meta.values())
    # every vocabulary token any canary of any kind uses as its secret, members and non-members alike: the
    # fine-tune gives each its own trainable input/output rows, as the new tokens have (fair kind comparisons)
    secret_ids = sorted({t for rows in rows_of.values() for r in rows for t in r["secret_ids"] if t < vocab.base_size})
    meta = {"base_vocab_size": vocab.base_size, "new_token_init": params.new_token_init, "prefix": params.prefix,
            "corpus": params.corpus, "kinds": kinds_meta, "num_new_tokens": num_new, "secret_token_ids": secret_ids}
    gx_reports = {kind: check_suites([canary_suite(kind, rows, params)], f"{where}/{kind}.parquet")[f"canaries_{kind}"]
                  for kind, rows in rows_of.items()}
    all_rows = [r for rows in rows_of.values() for r in rows]
    if reference_out is not None:
        ref = (reference_logprobs(all_rows, model_dir, num_new, params.new_token_init)
               if model_dir is not None and reference
               else [{"canary_id": r["canary_id"], "base_token_logprobs": []} for r in all_rows])
        write_table(pa.Table.from_pylist(ref, schema=REFERENCE), reference_out, REFERENCE)
    for kind, rows in rows_of.items():
        write_table(pa.Table.from_pylist(rows, schema=CANARIES), kind_path(out_dir, kind), CANARIES)
        log.info("canaries: %s m=%d members=%d new tokens=%d", kind, len(rows), kinds_meta[kind]["members"],
                 kinds_meta[kind]["new_tokens"])
    if params.formatted.enabled:
        meta["formatted"] = write_formatted(params.formatted, vocab.words, out_dir)
    if params.audit_users.enabled and audit_users:  # their new tokens follow the kinds' (meta num_new_tokens)
        meta[AUDIT_USERS_KIND], gx_reports[AUDIT_USERS_KIND] = write_audit_users(
            params.audit_users, vocab, vocab.base_size + num_new, out_dir, params.checks.member_share_alpha)
    write_json(out_dir / META, meta)
    write_json(out_dir / "gx_results.json", gx_reports)
    return meta
