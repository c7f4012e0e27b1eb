"""Extract a dataset's real secrets and check whether the base model already reproduces each."""
from __future__ import annotations

import re
from pathlib import Path

from ..shared.core.errors import ConfigError
from ..shared.core.io import read_table
from ..shared.datasets import CANDIDATES, DatasetSpec, read_split
from ..shared.datasets.pii import secret_candidates
from .extractors import DATASET_OF, EXTRACTORS, ExtractInput, pattern_secrets


def extract(spec: DatasetSpec, params, processed_dir: Path) -> list[dict]:
    """Run the configured extractors over the training split of ``spec``; one row per distinct secret value."""
    dataset = spec.name
    train = read_split(processed_dir, spec, "train")
    texts = spec.texts(train) if spec.texts else []
    data = ExtractInput(train, candidates(dataset, params, processed_dir, texts), texts)
    out: list[dict] = []
    for i, name in enumerate(params.extractors):
        key = f"secrets.datasets.{dataset}.extractors[{i}]"
        if name in params.patterns:
            fn = lambda d, p, kind=name: pattern_secrets(d, kind, p)  # noqa: E731
        else:
            fn = EXTRACTORS.get(name, key=f"{key} (or a name in secrets.datasets.{dataset}.patterns)")
            if DATASET_OF[name] not in (None, dataset):
                raise ConfigError(f"{key}: extractor {name!r} reads {DATASET_OF[name]}, not {dataset}")
            if DATASET_OF[name] is None and not spec.texts:
                raise ConfigError(f"{key}: extractor {name!r} reads text, which dataset {dataset!r} has none of")
        found = [s for s in fn(data, params) if s["occurrences"] >= params.min_occurrences]
        found.sort(key=lambda s: (-s["occurrences"], s["value"]))
        seen = {r["value"] for r in out if r["kind"] == name}
        found = [s for s in found if not (s["value"] in seen or seen.add(s["value"]))]
        if params.max_per_kind:
            found = found[: params.max_per_kind]
        out += [{"secret_id": f"{dataset}-{name}-{j:05d}", "dataset": dataset, "split": "train", **s}
                for j, s in enumerate(found)]
    return out


def candidates(dataset: str, params, processed_dir: Path, texts: list[tuple[str, str]]) -> list[dict]:
    """The candidates preprocess found (candidates.parquet, Enron's), else those mined here from the texts with
    ``mining`` (sequences, the PII kinds and the named patterns the extractors ask for)."""
    path = Path(processed_dir) / dataset / "candidates.parquet"
    if path.is_file():
        found = read_table(path, CANDIDATES).to_pylist()
        if params.patterns:  # named patterns: mined here from the texts (preprocess knows only the built-in PII)
            found += secret_candidates([t for _, t in texts], None, [], compiled(params.patterns))
        return found
    if not texts:
        return []
    m = params.mining
    if m is None:
        if {"sequence", "phone", "email"} & set(params.extractors) or params.patterns:
            raise ConfigError(f"secrets.datasets.{dataset}.mining: needed (no candidates.parquet from preprocess)")
        return []
    pii = [k for k in ("phone", "email") if k in params.extractors]
    sequences = (m.ngram_chars, m.top_k, m.min_count) if "sequence" in params.extractors else None
    return secret_candidates([t for _, t in texts], sequences, pii, compiled(params.patterns))


def compiled(patterns: dict[str, str]) -> dict:
    return {k: re.compile(v) for k, v in patterns.items()}


def base_reproduction(secrets: list[dict], model_dir: Path, batch_size: int) -> None:
    """Add base_greedy / base_logprob: does the base model continue each prompt with its secret?"""
    import torch

    from ..shared.lm.canary_lm import CanaryLM
    from ..shared.lm.examples import make_example
    from ..shared.lm.loading import load_base, pick_device
    from ..shared.lm.scoring import token_logprobs

    device = pick_device("auto")
    base, tok = load_base(model_dir, device)
    model = CanaryLM(base).to(device)
    examples = []
    for s in secrets:
        prompt = tok(s["prompt"], add_special_tokens=False)["input_ids"] or [tok.bos_token_id or tok.eos_token_id]
        cont = tok(s["continuation"], add_special_tokens=False)["input_ids"]
        examples.append(make_example(prompt[-256:], cont[:64], "sft", s["kind"]))
    with torch.no_grad():
        lps, greedy = token_logprobs(model, examples, tok.pad_token_id, batch_size, desc="base check", greedy=True)
    for s, lp, g in zip(secrets, lps, greedy):
        s["base_greedy"] = bool(g)
        s["base_logprob"] = float(lp.sum())
