"""DVC stage ``canaries``: build m canaries per kind -> data/canaries/<kind>.parquet + meta.json + GX results."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

from .config import CanaryParams, ModelParams, PreprocessParams, load, stage_args
from .errors import DataError, run_cli
from .io import atomic_dir

log = logging.getLogger("stages.canaries")


def vocab_of(model_dir: Path):
    """Base vocabulary size and the ordinary token ids (special and added tokens excluded)."""
    import numpy as np
    from transformers import AutoTokenizer

    from .canary import Vocab

    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise DataError(f"{model_dir}: no base model here (run the base_model stage)")
    base_size = int(json.loads(cfg_path.read_text())["vocab_size"])
    tok = AutoTokenizer.from_pretrained(model_dir)
    excluded = set(tok.all_special_ids) | set(getattr(tok, "added_tokens_decoder", {}) or {})
    usable = min(len(tok), base_size)
    allowed = np.array([i for i in range(usable) if i not in excluded], dtype=np.int64)
    words = sorted({w for w in (tok.decode([int(i)]).strip() for i in allowed) if w.isalpha() and len(w) >= 3})
    return Vocab(base_size=base_size, allowed=allowed, words=tuple(words))


def reference_logprobs(rows: list[dict], model_dir: Path, num_new: int, init: str, batch_size: int = 64) -> None:
    """Add ``base_token_logprobs``: every position's log-probability under the reference model (the
    base model plus the new-token rows at their initial values, i.e. the model before fine-tuning).
    Attacks use it for reference-calibrated scores; the IID guard compares it across members."""
    import torch

    from .models.canary_lm import CanaryLM
    from .models.loading import load_base, pick_device
    from .training.examples import make_example
    from .training.scoring import token_logprobs

    device = pick_device("auto")
    base, tok = load_base(model_dir, device)
    torch.manual_seed(0)
    model = CanaryLM(base, num_new=num_new, init=init).to(device)
    examples = [make_example(r["prefix_ids"], r["secret_ids"], "nwp", r["kind"]) for r in rows]
    lps = token_logprobs(model, examples, tok.pad_token_id, batch_size, desc="reference scores")
    for r, lp in zip(rows, lps):
        r["base_token_logprobs"] = lp.astype("float32").tolist()


def corpus_texts(processed_dir: Path, dataset: str, splits, tok, targets_only: bool = False) -> list[list[int]]:
    """Token ids of a processed dataset's fine-tuning texts (prompt + target, or the target alone)."""
    from .data.schemas import SCHEMAS
    from .io import read_table
    from .training.examples import PAIRS

    out = []
    for split in splits:
        rows = read_table(processed_dir / dataset / f"{split}.parquet", SCHEMAS[dataset]).to_pylist()
        texts = [t if targets_only else p + t for p, t in PAIRS[dataset](rows)]
        out += tok(texts, add_special_tokens=False)["input_ids"]
    return out


def base_next_token(model_dir: Path, batch_size: int = 64):
    """prefixes -> log p(next token | prefix) under the base model, (m, V) float32 (lazy model load)."""
    state: dict = {}

    def score(seqs: list[list[int]]):
        import numpy as np
        import torch

        from .models.canary_lm import CanaryLM
        from .models.loading import load_base

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


def build_canaries(params: CanaryParams, vocab, out_dir: Path, where: str = "data/canaries",
                   model_dir: Path | None = None, corpus=None, prefix_samples=None) -> dict:
    """Write every kind's canaries (schema- and GX-checked) and meta.json into ``out_dir``.

    ``corpus`` (token statistics of the fine-tuning data) is needed by the unigram/bigram kinds,
    ``model_dir`` by model-based canaries and the reference log-probabilities every canary gets,
    ``prefix_samples`` by held-out prefixes."""
    import pyarrow as pa

    from .canary import CANARY_KINDS, KindContext, build_kind
    from .checks.gx import canary_frame, canary_suite, check
    from .data.schemas import CANARIES
    from .errors import ConfigError
    from .io import write_json, write_table

    specs = [CANARY_KINDS.get(k, key=f"canaries.kinds[{i}]") for i, k in enumerate(params.kinds)]
    offset = vocab.base_size
    meta = {"base_vocab_size": vocab.base_size, "new_token_init": params.new_token_init, "prefix": params.prefix,
            "corpus": params.corpus, "kinds": {}}
    rows_of = {}
    scorer = base_next_token(model_dir) if model_dir is not None else None
    for i, spec in enumerate(specs):
        if "corpus" in spec.needs and corpus is None or "model" in spec.needs and scorer is None:
            raise ConfigError(f"canaries.kinds[{i}]: kind {spec.name!r} needs the {spec.needs[0]} it is built from")
        n_new = spec.new_tokens(params.num_canaries, params.secret_length)
        ctx = KindContext(vocab, offset, corpus, scorer)
        try:
            rows_of[spec.name] = build_kind(spec.name, params, ctx, prefix_samples)
        except ValueError as exc:
            raise DataError(f"canaries.kinds[{i}] ({spec.name}): {exc}") from None
        members = sum(r["member"] for r in rows_of[spec.name])
        meta["kinds"][spec.name] = {
            "m": len(rows_of[spec.name]), "members": members, "prefix_length": params.prefix_length,
            "secret_length": params.secret_length, "new_token_offset": offset if n_new else None,
            "new_tokens": n_new, "description": spec.description,
        }
        offset += n_new
        log.info("canaries: built %s", spec.name)
    meta["num_new_tokens"] = offset - vocab.base_size
    gx_reports = {}
    for kind, rows in rows_of.items():
        gx_reports[kind] = check(
            f"canaries_{kind}", canary_frame(rows),
            canary_suite([kind], params.checks.member_share_min, params.checks.member_share_max,
                         params.prefix_length, params.secret_length),
            f"{where}/{kind}.parquet")
    all_rows = [r for rows in rows_of.values() for r in rows]
    if model_dir is not None:
        reference_logprobs(all_rows, model_dir, meta["num_new_tokens"], params.new_token_init)
    for r in all_rows:
        r.setdefault("base_token_logprobs", [])
    for kind, rows in rows_of.items():
        write_table(pa.Table.from_pylist(rows, schema=CANARIES), out_dir / f"{kind}.parquet", CANARIES)
        log.info("canaries: %s m=%d members=%d new tokens=%d", kind, len(rows), meta["kinds"][kind]["members"],
                 meta["kinds"][kind]["new_tokens"])
    if params.formatted.enabled:
        from .canary.formatted import build_formatted
        from .data.schemas import FORMATTED

        rows = build_formatted(params.formatted, vocab.words)
        write_table(pa.Table.from_pylist(rows, schema=FORMATTED), out_dir / "formatted.parquet", FORMATTED)
        meta["formatted"] = {"formats": list(params.formatted.formats), "candidates": params.formatted.candidates,
                             "inserted": sum(r["inserted"] for r in rows),
                             "inserted_rows": sum(r["repetitions"] for r in rows)}
    write_json(out_dir / "meta.json", meta)
    write_json(out_dir / "gx_results.json", gx_reports)
    return meta


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__)
    params = load(CanaryParams, "canaries", args.params, raw)
    model = load(ModelParams, "model", args.params, raw)
    pre = load(PreprocessParams, "preprocess", args.params, raw)
    from .canary import CANARY_KINDS

    for i, k in enumerate(params.kinds):  # unknown kinds fail before anything is written
        CANARY_KINDS.get(k, key=f"{args.params}: canaries.kinds[{i}]")
    vocab = vocab_of(Path(model.out))
    from transformers import AutoTokenizer

    from .canary import Corpus

    tok = AutoTokenizer.from_pretrained(model.out)
    processed = Path(pre.out_dir)
    corpus = Corpus.from_sequences(corpus_texts(processed, params.corpus, ["train"], tok), vocab.base_size)
    heldout = ["test"] if params.corpus == "tofu" else ["valid", "test"]
    samples = corpus_texts(processed, params.corpus, heldout, tok, targets_only=True) if params.prefix == "heldout" else None
    with atomic_dir(Path(params.out_dir)) as tmp:
        build_canaries(params, vocab, tmp, where=params.out_dir, model_dir=Path(model.out), corpus=corpus,
                       prefix_samples=samples)
        if params.users.enabled:
            from .canary.users import build_canary_users

            build_canary_users(params.users, processed, tok, tmp)


if __name__ == "__main__":
    run_cli(main)
