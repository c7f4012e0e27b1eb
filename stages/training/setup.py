"""Build the trainable model for a run (base + paradigm + new-token rows) and save/load it.

Paradigms: ``lora`` (peft LoRA on the target modules), ``full`` (every decoder weight; the tied
embedding/output matrix stays frozen, as opacus cannot clip a weight used by two modules, and the
new-token rows carry what the canaries need), ``prompt`` (peft prompt tuning) and ``prefix`` (peft
prefix tuning). New-token rows are trainable in every paradigm.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError, DataError
from ..models.canary_lm import CanaryLM
from ..models.loading import load_base

TRAINABLE = "trainable.safetensors"


def build_model(base_dir: str | Path, params, num_new: int, init: str, device):
    """(CanaryLM, tokenizer) ready to train: only the paradigm's weights + new rows require grad."""
    base, tok = load_base(base_dir, device)
    for p in base.parameters():
        p.requires_grad_(False)
    lm, soft, prefix = base, 0, 0
    if params.paradigm == "lora":
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(r=params.lora.r, lora_alpha=params.lora.alpha, lora_dropout=params.lora.dropout,
                         target_modules=list(params.lora.targets), bias="none")
        try:
            lm = get_peft_model(base, cfg)
        except ValueError as exc:
            raise ConfigError(f"finetune.lora.targets: {str(exc).splitlines()[0]}") from None
    elif params.paradigm == "full":
        frozen = {id(base.get_input_embeddings().weight), id(base.get_output_embeddings().weight)}
        for p in base.parameters():
            if id(p) not in frozen:
                p.requires_grad_(True)
    elif params.paradigm == "prompt":
        soft = params.virtual_tokens
    elif params.paradigm == "prefix":
        prefix = params.virtual_tokens
    else:  # pragma: no cover - guarded by the params Literal
        raise ConfigError(f"finetune.paradigm: unknown paradigm {params.paradigm!r}")
    model = CanaryLM(lm, num_new=num_new, init=init, soft_prompt=soft, prefix=prefix).to(device)
    return model, tok


def save_model(model: CanaryLM, out_dir: Path) -> None:
    """trainable.safetensors (every trainable tensor); LoRA runs also get a peft adapter directory."""
    model.save_trainable(out_dir / TRAINABLE)
    if hasattr(model.lm, "peft_config"):
        model.lm.save_pretrained(out_dir / "adapter")


def load_model(base_dir: str | Path, run_dir: str | Path, device):
    """Load a fine-tuned run for scoring; returns (CanaryLM, tokenizer)."""
    from ..config import FinetuneParams, build

    run_dir = Path(run_dir)
    info_path = run_dir / "run.json"
    if not info_path.is_file():
        raise DataError(f"{run_dir}: no fine-tuned run here (run.json missing; run the finetune stage)")
    info = json.loads(info_path.read_text())
    params = build(FinetuneParams, info["params"], f"{info_path}:params")
    model, tok = build_model(base_dir, params, info["num_new_tokens"], "zero", device)
    model.load_trainable(run_dir / TRAINABLE)
    model.eval()
    return model, tok
