"""DVC stage ``finetune@<run>``: fine-tune the base model on a processed dataset (PersonaChat by default)
plus the member canaries (non-DP or opacus DP-SGD) -> data/models/<run>/ (adapter, new-token rows,
run.json, privacy.json, train_log.jsonl)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Sequence

from .config import CanaryParams, ModelParams, PreprocessParams, load, load_finetune, stage_args
from .errors import run_cli
from .io import atomic_dir

log = logging.getLogger("stages.finetune")


def load_canary_rows(canary_dir: Path) -> tuple[dict, dict[str, list[dict]]]:
    from .data.schemas import CANARIES
    from .io import read_json, read_table

    meta = read_json(canary_dir / "meta.json")
    rows = {k: read_table(canary_dir / f"{k}.parquet", CANARIES).to_pylist() for k in meta["kinds"]}
    return meta, rows


def canary_shares(canary_ex, formatted_ex, pool, scheduled, q: float, scheduled_rate: float) -> dict:
    """Expected share of the training tokens (all, and those with a loss) that are canaries, per step:
    pool examples are drawn at rate q, scheduled canaries at repetitions / steps."""
    def tokens(exs, labelled):
        return sum(int((e.labels != -100).sum()) if labelled else len(e) for e in exs)

    out = {}
    for labelled, key in ((False, "canary_share_of_tokens"), (True, "canary_share_of_loss_tokens")):
        canary = (q * tokens([] if scheduled else canary_ex, labelled) + scheduled_rate * tokens(scheduled, labelled))
        total = q * tokens(pool, labelled) + scheduled_rate * tokens(scheduled, labelled)
        out[key] = canary / max(total, 1e-12)
        out[key.replace("canary", "formatted_canary")] = q * tokens(formatted_ex, labelled) / max(total, 1e-12)
    return out


def formatted_examples(canary_dir: Path, tok) -> list:
    """Inserted secret-sharer canaries, each repeated its number of times (whole sentence learned)."""
    from .data.schemas import FORMATTED
    from .io import read_table
    from .training.examples import make_example

    path = canary_dir / "formatted.parquet"
    if not path.is_file():
        return []
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    out = []
    for r in read_table(path, FORMATTED).to_pylist():
        if r["inserted"]:
            e = make_example([bos], tok(r["text"], add_special_tokens=False)["input_ids"], "nwp", "formatted")
            out += [e] * r["repetitions"]
    return out


def text_examples_of(processed: Path, split: str, tok, params, n: int, seed: int, canary_users=None):
    """A seeded sample of n (prompt, target) examples of ``params.dataset``'s split (canary users'
    substrings inserted into their documents when ``canary_users`` is given)."""
    from .canary.users import apply_canary_users
    from .data.schemas import SCHEMAS
    from .io import read_table
    from .training.examples import PAIRS, sample, text_examples

    rows = read_table(processed / params.dataset / f"{split}.parquet", SCHEMAS[params.dataset]).to_pylist()
    rows = apply_canary_users(rows, canary_users or {})
    pairs = sample(PAIRS[params.dataset](rows), n, seed)
    return text_examples(pairs, tok, params.max_length, params.objective)


def run_finetune(run: str, ft, canary_params, model_params, pre_params, out_dir: Path) -> dict:
    import torch

    from .io import read_json, write_json
    from .models.loading import pick_device
    from .training.examples import canary_examples
    from .training.loop import Checkpointer, examples_fingerprint, mean_nll, train, write_log
    from .training.setup import build_model, save_model

    device = pick_device(ft.device)
    torch.manual_seed(ft.seed)
    meta, canaries = load_canary_rows(Path(canary_params.out_dir))
    model, tok = build_model(model_params.out, ft, meta["num_new_tokens"], meta["new_token_init"], device)
    processed = Path(pre_params.out_dir)
    eval_split = "valid" if ft.dataset != "tofu" else "test"  # TOFU has no valid split (App. B.3)
    from .canary.users import load_canary_users

    cusers = load_canary_users(Path(canary_params.out_dir)) if ft.dataset == "enron_users" else {}
    text = text_examples_of(processed, "train", tok, ft, ft.max_text_rows, ft.seed, cusers)
    evals = text_examples_of(processed, eval_split, tok, ft, ft.eval_rows, ft.seed + 1, cusers)
    members = {k: [r for r in rows if r["member"]] for k, rows in canaries.items()} if ft.canaries else {}
    canary_ex = [e for k in members for e in canary_examples(members[k], ft.objective)]
    formatted_ex = formatted_examples(Path(canary_params.out_dir), tok) if ft.canaries else []
    scheduled = canary_ex if ft.canary_insertion == "repetitions" else []
    examples = text + formatted_ex + ([] if scheduled else canary_ex)
    log.info("run %s: %d text rows + %d member canaries on %s", run, len(text), len(canary_ex), device)
    checkpoint = None
    if ft.checkpoint_every:
        config = {k: v for k, v in dataclasses.asdict(ft).items() if not k.startswith("checkpoint")}
        key = hashlib.sha1((json.dumps(config, sort_keys=True) + examples_fingerprint(examples + scheduled)).encode()).hexdigest()
        checkpoint = Checkpointer(Path(ft.checkpoint_dir) / f"{run}.pt", ft.checkpoint_every, key)
    result = train(
        model, examples, steps=ft.steps, batch_size=ft.batch_size, physical_batch_size=ft.physical_batch_size,
        lr=ft.lr, weight_decay=ft.weight_decay, clip_norm=ft.clip_norm, seed=ft.seed,
        pad_id=tok.pad_token_id, dp=ft.dp, sample_rate=ft.sample_rate, optimizer=ft.optimizer,
        momentum=ft.momentum, checkpoint=checkpoint, scheduled=scheduled, repetitions=ft.canary_repetitions,
    )
    if result.resumed_from:
        log.info("run %s: resumed from the checkpoint at step %d", run, result.resumed_from)
    utility = mean_nll(model, evals, tok.pad_token_id)
    save_model(model, out_dir)
    write_log(out_dir / "train_log.jsonl", result.log)
    privacy = result.privacy if result.privacy["dp"] else {
        "dp": False, "epsilon_spent": float("inf"), "sample_rate": result.sample_rate, "steps": result.steps}
    write_json(out_dir / "privacy.json", privacy)
    info = {
        "run": run,
        "params": dataclasses.asdict(ft),
        "device": str(device),
        "base_model": read_json(Path(model_params.out) / "source.json"),
        "num_new_tokens": meta["num_new_tokens"],
        "new_token_init": meta["new_token_init"],
        "n_examples": len(examples),
        "n_text_rows": len(text),
        "n_member_canaries": {k: len(v) for k, v in members.items()},
        "n_formatted_rows": len(formatted_ex),
        "canary_users": sorted(cusers),
        **canary_shares(canary_ex, formatted_ex, examples, scheduled, result.sample_rate,
                        ft.canary_repetitions / ft.steps),
        "sample_rate": result.sample_rate,
        "expected_batch_size": result.expected_batch_size,
        "steps": result.steps,
        "expected_exposures_per_member": (ft.canary_repetitions if scheduled else result.sample_rate * result.steps),
        "canary_insertion": ft.canary_insertion,
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "train_seconds": result.seconds,
        "resumed_from_step": result.resumed_from,
        "final_loss": result.log[-1]["loss"] if result.log else None,
        "valid": {"rows": len(evals), **utility},
        "privacy": privacy,
    }
    write_json(out_dir / "run.json", info)
    log.info("run %s: %d steps in %.0f s, valid ppl %.2f, epsilon %s", run, result.steps, result.seconds,
             utility["perplexity"] or float("nan"), privacy.get("epsilon_spent"))
    return info


def main(argv: Sequence[str] | None = None) -> None:
    args, raw = stage_args(argv, __doc__, "run")
    ft = load_finetune(args.run, args.params, raw)
    canary_params = load(CanaryParams, "canaries", args.params, raw)
    model_params = load(ModelParams, "model", args.params, raw)
    pre_params = load(PreprocessParams, "preprocess", args.params, raw)
    with atomic_dir(Path(ft.out_dir) / args.run) as tmp:
        run_finetune(args.run, ft, canary_params, model_params, pre_params, tmp)


if __name__ == "__main__":
    run_cli(main)
