"""DVC stage ``secrets@<dataset>``: real secrets of the training split -> data/secrets/<dataset>.parquet.

Extractors read data/processed/<dataset>/train.parquet and the secret candidates preprocess found
there; each secret records whether the base model already reproduces it (greedy, teacher-forced)
and its base log-probability, so later memorization metrics can subtract base-model leakage.
"""
from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Sequence

from .config import ModelParams, PreprocessParams, SecretsParams, load, stage_args
from .errors import ConfigError, run_cli

log = logging.getLogger("stages.secrets")


def extract(dataset: str, params, processed_dir: Path) -> list[dict]:
    """Run the configured extractors over the training split; one row per distinct secret value."""
    from .data.schemas import CANDIDATES, SCHEMAS
    from .extractors import DATASET_OF, EXTRACTORS, ExtractInput
    from .io import read_table

    train = read_table(processed_dir / "train.parquet", SCHEMAS[dataset]).to_pylist()
    cand_path = processed_dir / "candidates.parquet"
    candidates = read_table(cand_path, CANDIDATES).to_pylist() if cand_path.is_file() else []
    data = ExtractInput(train, candidates)
    out: list[dict] = []
    for i, name in enumerate(params.extractors):
        fn = EXTRACTORS.get(name, key=f"secrets.{dataset}.extractors[{i}]")
        if DATASET_OF[name] != dataset:
            raise ConfigError(
                f"secrets.{dataset}.extractors[{i}]: extractor {name!r} reads {DATASET_OF[name]}, not {dataset}")
        found = [s for s in fn(data, params) if s["occurrences"] >= params.min_occurrences]
        found.sort(key=lambda s: (-s["occurrences"], s["value"]))
        seen = {r["value"] for r in out if r["kind"] == name}
        found = [s for s in found if not (s["value"] in seen or seen.add(s["value"]))]
        if params.max_per_kind:
            found = found[: params.max_per_kind]
        out += [{"secret_id": f"{dataset}-{name}-{j:05d}", "dataset": dataset, "split": "train", **s}
                for j, s in enumerate(found)]
    return out


def base_reproduction(secrets: list[dict], model_dir: Path, batch_size: int) -> None:
    """Add base_greedy / base_logprob: does the base model continue each prompt with its secret?"""
    import torch

    from .models.canary_lm import CanaryLM
    from .models.loading import load_base, pick_device
    from .training.examples import make_example
    from .training.scoring import token_logprobs

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


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "dataset")
    params = load(SecretsParams, "secrets", args.params, raw)
    pre = load(PreprocessParams, "preprocess", args.params, raw)
    model = load(ModelParams, "model", args.params, raw)
    ds_params = getattr(params, args.dataset, None)
    if not isinstance(ds_params, object) or args.dataset not in ("enron", "tofu"):
        raise ConfigError(f"--dataset: no secrets section for {args.dataset!r} (known: enron, tofu)")
    import pyarrow as pa

    from .data.schemas import SECRETS
    from .io import write_table

    rows = extract(args.dataset, ds_params, Path(pre.out_dir) / args.dataset)
    if ds_params.base_check and rows:
        base_reproduction(rows, Path(model.out), params.batch_size)
    for r in rows:
        r.setdefault("base_greedy", None)
        r.setdefault("base_logprob", None)
    write_table(pa.Table.from_pylist(rows, schema=SECRETS), Path(params.out_dir) / f"{args.dataset}.parquet", SECRETS)
    counts = Counter(r["kind"] for r in rows)
    base = Counter(r["kind"] for r in rows if r.get("base_greedy"))
    for kind, n in sorted(counts.items()):  # counts only, never values
        log.info("%s: %d %s secrets (%d already reproduced by the base model)", args.dataset, n, kind, base[kind])


if __name__ == "__main__":
    run_cli(main)
