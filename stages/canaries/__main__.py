"""DVC stage ``canaries``: build m canaries per kind -> data/canaries/<kind>.parquet + meta.json + GX results, and
their reference log-probabilities -> data/reference/canaries.parquet (floats in a file of their own).
``--replica <name>``: replica <name>'s own canaries (its seed) in its own directory
(``stages.shared.core.replicas``)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from stages.canaries.build import build_canaries, corpus_texts, vocab_of
from stages.canaries.kinds import CANARY_KINDS, Corpus
from stages.canaries.params import CanaryParams
from stages.canaries.users import build_canary_users
from stages.shared.core.artifacts import locations
from stages.shared.core.cli import run_cli, stage_args
from stages.shared.core.io import atomic_dir, atomic_file
from stages.shared.core.params import load, section_of
from stages.shared.datasets import get_dataset
from stages.shared.lm.loading import load_tokenizer


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, replica=True)
    params = load(CanaryParams, "canaries", args.params, raw)
    where = locations(raw, args.params)
    for i, k in enumerate(params.kinds):  # unknown kinds fail before anything is written
        CANARY_KINDS.get(k, key=f"{args.params}: canaries.kinds[{i}]")
    tok = load_tokenizer(where.base_model)
    vocab = vocab_of(where.base_model, tok)
    spec = get_dataset(params.corpus, raw)
    corpus = Corpus.from_sequences(corpus_texts(where.processed, spec, ["train"], tok), vocab.base_size)
    samples = (corpus_texts(where.processed, spec, spec.heldout_splits, tok, targets_only=True)
               if params.prefix == "heldout" else None)
    with atomic_dir(Path(params.out_dir)) as tmp, atomic_file(Path(params.reference_out)) as ref:
        build_canaries(params, vocab, tmp, where=params.out_dir, model_dir=where.base_model, corpus=corpus,
                       prefix_samples=samples, reference_out=ref,
                       reference=section_of(raw, "replicas.reference") if args.replica else True,
                       audit_users=not args.replica)  # a replica's recipe is an example-level one
        if params.users.enabled:
            build_canary_users(params.users, get_dataset(params.users.dataset, raw), where.processed, tok, tmp)


if __name__ == "__main__":
    run_cli(main)
