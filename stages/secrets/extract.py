"""Extract a dataset's real secrets and check whether the base model already reproduces each."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError
from ..core.io import read_table
from ..datasets import CANDIDATES, read_split
from .extractors import DATASET_OF, EXTRACTORS, ExtractInput


def extract(dataset: str, params, processed_dir: Path) -> list[dict]:
    """Run the configured extractors over the training split; one row per distinct secret value."""
    train = read_split(processed_dir, dataset, "train")
    cand_path = Path(processed_dir) / dataset / "candidates.parquet"
    candidates = read_table(cand_path, CANDIDATES).to_pylist() if cand_path.is_file() else []
    data = ExtractInput(train, candidates)
    out: list[dict] = []
    for i, name in enumerate(params.extractors):
        key = f"secrets.datasets.{dataset}.extractors[{i}]"
        fn = EXTRACTORS.get(name, key=key)
        if DATASET_OF[name] != dataset:
            raise ConfigError(f"{key}: extractor {name!r} reads {DATASET_OF[name]}, not {dataset}")
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

    from ..lm.canary_lm import CanaryLM
    from ..lm.examples import make_example
    from ..lm.loading import load_base, pick_device
    from ..lm.scoring import token_logprobs

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
