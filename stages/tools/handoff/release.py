"""``leakaudit release --run R --out DIR``: a fine-tuned run's model as a plain transformers model (and tokenizer),
with nothing else of the run: a release manifest says what was left out and why.

The run's CanaryLM becomes the causal LM it computes: LoRA merged into the weights (peft ``merge_and_unload``), the
secret rows written over their vocabulary rows, the new-token rows appended to the (untied) input embeddings and
output head. The released model's logits equal the run's (a test). Prompt and prefix tuning have no plain
transformers form and are refused. Left out, always: manifest.parquet (who is a member), auditor.json (member counts
and member-only statistics), run.json (the pipeline's record), the step log, the trained tensors as the pipeline
stores them. The directory is written to a temporary path and renamed, so a failure leaves none.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import torch

from ...finetune.schema import AUDITOR_FILE, MANIFEST_FILE, RUN_FILE, read_run
from ...shared.core.errors import ConfigError
from ...shared.core.io import write_json

RELEASE_MANIFEST = "release_manifest.json"
RELEASE_VERSION = 1
#: what a run's directory holds that a release never does, and why
LEFT_OUT = {
    MANIFEST_FILE: "membership: which candidates the run trained on",
    AUDITOR_FILE: "member counts and member-only statistics (the auditor's record)",
    RUN_FILE: "the pipeline's record of the run (params, privacy record): published with the audit, not the model",
    "train_log.jsonl": "the pipeline's step log",
    "trainable.safetensors": "the trained tensors as the pipeline stores them (merged into the released weights)",
    "adapter": "the LoRA adapter (merged into the released weights)",
    "external": "a run trained elsewhere: its model is the trainer's own",
}


def causal_lm(model) -> torch.nn.Module:
    """The transformers causal LM a CanaryLM computes (see the module doc); ``model`` is changed in place."""
    if model.soft_prompt or model.prefix_len:
        raise ConfigError("release: prompt and prefix tuning have no plain transformers form (use the run's "
                          "directory with this project's loader)")
    lm = model.lm
    if hasattr(lm, "merge_and_unload"):
        lm = lm.merge_and_unload()
    with torch.no_grad():
        if model.num_new or model.num_rows:
            emb, head = lm.get_input_embeddings(), lm.get_output_embeddings()
            if head.weight is emb.weight or lm.config.tie_word_embeddings:  # own rows differ in and out
                head.weight = torch.nn.Parameter(emb.weight.detach().clone())
                lm.config.tie_word_embeddings = False
                if hasattr(lm.config, "get_text_config"):
                    lm.config.get_text_config().tie_word_embeddings = False
        if model.num_rows:
            ids = model.row_ids
            lm.get_input_embeddings().weight[ids] = model.row_embed.weight.to(lm.get_input_embeddings().weight.dtype)
            lm.get_output_embeddings().weight[ids] = model.row_head.weight.to(lm.get_output_embeddings().weight.dtype)
        if model.num_new:
            base = model.base_vocab
            lm.resize_token_embeddings(base + model.num_new, mean_resizing=False)
            lm.get_input_embeddings().weight[base:] = model.new_embed.weight
            lm.get_output_embeddings().weight[base:] = model.new_head.weight
    return lm.eval()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def release(run: str, run_dir: Path, base_dir: Path, out: Path) -> dict:
    """Write run ``run``'s model (from ``run_dir``, over the base model in ``base_dir``) and the base tokenizer to
    ``out`` (replaced atomically); returns the release manifest."""
    from ...shared.lm.trainable import load_model

    info = read_run(run_dir, run)
    if info.external:
        raise ConfigError(f"release: run {run} was trained elsewhere; its model is the trainer's own")
    spec = info.trainable
    model, tok = load_model(base_dir, run_dir, spec, torch.device("cpu"))
    lm = causal_lm(model)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-release")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        lm.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        files = {p.name: _sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        present = {p.name for p in Path(run_dir).iterdir()}
        manifest = {
            "version": RELEASE_VERSION, "run": run, "paradigm": spec.paradigm,
            "base_model": {k: v for k, v in info.base_model.items()
                           if k in ("name_or_path", "package", "package_version", "sha256", "architecture")},
            "vocabulary": {"base": model.base_vocab, "new_tokens": model.num_new},
            "privacy": {k: getattr(info.privacy, k) for k in ("dp", "epsilon_spent", "delta", "noise_multiplier",
                                                              "sample_rate", "steps", "max_grad_norm", "accountant")},
            "files": files,
            "left_out": {name: why for name, why in LEFT_OUT.items() if name in present},
        }
        write_json(tmp / RELEASE_MANIFEST, manifest)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def release_for(run: str, params_path: Path, out: Path) -> dict:
    """``leakaudit release``: run ``run`` of the params at ``params_path`` (its directory and base model)."""
    from ...shared.core.artifacts import locations
    from ...shared.core.params import read_params

    raw = read_params(params_path)
    where, root = locations(raw, params_path), Path(params_path).parent
    return release(run, root / where.run_dir(run), root / where.base_model, out)
